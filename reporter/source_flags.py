"""The ``--prometheus-*`` flags of every MCO part that reads a PromQL engine (the reporter, the
rulegen controller's guard), spelled once, and the ``SourceConfig`` they make."""

from __future__ import annotations

import argparse
import re

from mco.flags import duration, size
from reporter.promql import DEFAULT_MAX_ANSWER_BYTES, SourceConfig


def header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not re.fullmatch(r"[A-Za-z0-9-]+", name.strip()):
        raise argparse.ArgumentTypeError("a header is 'Name: value'")
    return name.strip(), value.strip()


def add_source_flags(parser: argparse.ArgumentParser, *, required: bool, url_help: str) -> None:
    src = parser.add_argument_group("PromQL source")
    src.add_argument("--prometheus-url", required=required, help=url_help)
    src.add_argument("--prometheus-timeout", type=duration, default=5.0, metavar="DURATION")
    src.add_argument("--prometheus-bearer-token-file", metavar="FILE")
    src.add_argument("--prometheus-basic-auth-user", metavar="USER")
    src.add_argument("--prometheus-basic-auth-password-file", metavar="FILE")
    src.add_argument("--prometheus-ca-file", metavar="FILE")
    src.add_argument("--prometheus-cert-file", metavar="FILE", help="client certificate")
    src.add_argument("--prometheus-key-file", metavar="FILE")
    src.add_argument("--prometheus-insecure-skip-verify", action="store_true")
    src.add_argument(
        "--prometheus-header",
        type=header,
        action="append",
        default=[],
        metavar="'NAME: VALUE'",
        help="extra request header, e.g. 'X-Scope-OrgID: team-a' (repeatable)",
    )
    src.add_argument(
        "--prometheus-compression",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="ask for gzip answers (fewer bytes on the wire, more CPU)",
    )
    src.add_argument(
        "--prometheus-max-answer-bytes",
        type=size,
        default=DEFAULT_MAX_ANSWER_BYTES,
        metavar="SIZE",
        help="answer bytes held in memory at once, all queries together, raw and inflated; "
        "more is refused (default 48Mi: fits the chart's 256Mi limit)",
    )


def source_config(args: argparse.Namespace) -> SourceConfig | None:
    """The source the flags name, validated; None without ``--prometheus-url``."""
    if not args.prometheus_url:
        return None
    source = SourceConfig(
        url=args.prometheus_url,
        timeout=args.prometheus_timeout,
        bearer_token_file=args.prometheus_bearer_token_file,
        basic_auth_user=args.prometheus_basic_auth_user,
        basic_auth_password_file=args.prometheus_basic_auth_password_file,
        ca_file=args.prometheus_ca_file,
        cert_file=args.prometheus_cert_file,
        key_file=args.prometheus_key_file,
        insecure_skip_verify=args.prometheus_insecure_skip_verify,
        headers=dict(args.prometheus_header),
        compression=args.prometheus_compression,
        max_answer_bytes=args.prometheus_max_answer_bytes,
    )
    source.validate()
    return source
