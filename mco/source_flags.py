"""The ``--prometheus-*`` flags of every MCO part that reads a PromQL engine (the reporter, the
rulegen controller's guard), spelled once, and the ``SourceConfig`` they make."""

from __future__ import annotations

import argparse
import re

from mco.flags import duration, size
from mco.promql import DEFAULT_MAX_ANSWER_BYTES, SourceConfig, safe_url


def header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not re.fullmatch(r"[A-Za-z0-9-]+", name.strip()):
        raise argparse.ArgumentTypeError("a header is 'Name: value'")
    return name.strip(), value.strip()


def add_source_flags(
    parser: argparse.ArgumentParser, *, required: bool, url_help: str, repeatable: bool = False
) -> None:
    """``repeatable``: ``--prometheus-url`` may be given once per shard (``source_configs``)."""
    src = parser.add_argument_group("PromQL source")
    if repeatable:
        src.add_argument("--prometheus-url", required=required, action="append", help=url_help)
    else:
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
    return _config(args, args.prometheus_url)


def source_configs(args: argparse.Namespace) -> list[SourceConfig]:
    """One source per ``--prometheus-url`` (added with ``repeatable=True``), each with the
    ``--prometheus-*`` flags they share, validated. The same URL twice (as written in logs and
    metrics: without credentials or query) is refused: its shard would be queried twice."""
    sources = [_config(args, url) for url in args.prometheus_url or []]
    urls = [safe_url(s.url) for s in sources]
    repeated = sorted({u for u in urls if urls.count(u) > 1})
    if repeated:
        raise ValueError(f"--prometheus-url given twice: {', '.join(repeated)}")
    return sources


def _config(args: argparse.Namespace, url: str) -> SourceConfig:
    source = SourceConfig(
        url=url,
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
