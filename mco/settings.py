"""The one settings convention of every MCO console script (kopf's ``OperatorSettings`` idea).

Each script parses its flags once, with ``parse``, into one frozen settings dataclass; the
CLI module then only wires parts together from it. The pieces every script shares live here:
log flags, the servers' ``--web.listen-address`` and ``--web.config.file``, deprecated
spellings, and one error path: a bad flag or configuration file exits 2 with one line,
``mco-X: error: <reason>``, on stderr.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

from mco import webconfig
from mco.flags import FlagError, listen_address
from mco.logs import setup_logging
from mco.webconfig import WebSettings

S = TypeVar("S")
_DEPRECATED = "deprecated_flags"  # namespace attribute: the old spellings used, in order
log = logging.getLogger("mco.settings")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (no usage dump), exit status 2, named
    after the binary even in a subcommand (``mco-rulegen: error: ...``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog.split()[0]}: error: {one_line(message)}\n")


def fail(prog: str, message: str) -> int:
    """The same one-line error for a configuration found bad after parsing; returns 2."""
    sys.stderr.write(f"{prog}: error: {one_line(message)}\n")
    return 2


def one_line(text: str, limit: int = 500) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def parse(
    parser: argparse.ArgumentParser,
    argv: Sequence[str] | None,
    build: Callable[[argparse.Namespace], S],
) -> S:
    """Flags -> settings, once. Any ValueError or OSError from ``build`` (a flag value, a
    configuration file) becomes the parser's one-line error and exit status 2."""
    args = parser.parse_args(argv)
    try:
        return build(args)
    except (ValueError, OSError, argparse.ArgumentTypeError) as exc:
        parser.error(str(exc))


@dataclass(frozen=True, slots=True)
class LogSettings:
    level: str = "info"
    format: str = "logfmt"


def log_settings(args: argparse.Namespace) -> LogSettings:
    return LogSettings(args.log_level, args.log_format)


def start_logging(settings: LogSettings, deprecated: Sequence[str] = ()) -> None:
    """Set up logging, then warn once about each deprecated flag the command line used."""
    setup_logging(settings.level, settings.format)
    for note in deprecated:
        log.warning("deprecated flag", extra={"flag": note})


class _Deprecated(argparse.Action):
    """An old spelling: stores like the new flag and records itself for a warning."""

    def __init__(self, *args: Any, replacement: str, store: Any = None, **kwargs: Any) -> None:
        self.replacement = replacement
        self.store = store
        super().__init__(*args, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values if self.store is None else self.store)
        used: list[str] = getattr(namespace, _DEPRECATED, None) or []
        note = f"{option_string} is deprecated and will be removed; use {self.replacement}"
        if note not in used:
            used.append(note)
        setattr(namespace, _DEPRECATED, used)


def add_deprecated(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    *flags: str,
    dest: str,
    replacement: str,
    **kwargs: Any,
) -> None:
    """Accept ``flags`` for one more release, hidden from --help, mapped onto ``dest``."""
    parser.add_argument(
        *flags,
        dest=dest,
        action=_Deprecated,
        replacement=replacement,
        help=argparse.SUPPRESS,
        default=argparse.SUPPRESS,
        **kwargs,
    )


def deprecated(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(getattr(args, _DEPRECATED, None) or ())


# The old TLS flags, per spelling family: each maps onto one tls_server_config key.
_LEGACY_TLS = {
    "cert_file": ("--web.tls-cert-file", "--tls-cert-file", "--tls-cert"),
    "key_file": ("--web.tls-key-file", "--tls-key-file", "--tls-key"),
    "client_ca_file": ("--web.tls-client-ca-file", "--tls-client-ca-file", "--client-ca"),
}


def add_web_flags(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    *,
    default_listen: str,
    legacy_tls: Sequence[str] = ("--web.tls-",),
    legacy_listen: Sequence[str] = (),
    listen_help: str = "",
) -> None:
    """``--web.listen-address`` and ``--web.config.file``, plus the deprecated spellings this
    server accepted before (``legacy_tls``: the prefixes of its old TLS flags)."""
    parser.add_argument(
        "--web.listen-address",
        dest="listen",
        default=default_listen,
        metavar="[HOST]:PORT",
        help=f"address to serve on; ':PORT' is every interface, IPv4 and IPv6 "
        f"(default {default_listen}){listen_help}",
    )
    parser.add_argument(
        "--web.config.file",
        dest="web_config_file",
        default="",
        metavar="FILE",
        help="exporter-toolkit web configuration: TLS, basic auth, response headers",
    )
    for flag in legacy_listen:
        add_deprecated(parser, flag, dest="listen", replacement="--web.listen-address")
    for key, spellings in _LEGACY_TLS.items():
        flags = [s for s in spellings if any(s.startswith(p) for p in legacy_tls)]
        if flags:
            add_deprecated(
                parser,
                *flags,
                dest=f"legacy_tls_{key}",
                replacement=f"--web.config.file (tls_server_config.{key})",
                metavar="FILE",
            )


def web_settings(args: argparse.Namespace) -> WebSettings:
    """The parsed web flags; ValueError (a FlagError or WebConfigError) when they are bad."""
    host, port = listen_address(args.listen)
    legacy = {key: getattr(args, f"legacy_tls_{key}", None) for key in _LEGACY_TLS}
    if args.web_config_file:
        if any(legacy.values()):
            raise FlagError("--web.config.file and the deprecated TLS flags cannot be combined")
        config = webconfig.load(args.web_config_file)
    else:
        config = webconfig.tls_files(**legacy)
    return WebSettings(host, port, config)


_SA_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def own_namespace() -> str:
    """The Lease's namespace when no flag names one: the pod's own (``POD_NAMESPACE``, else the
    service account's), else ``default`` — the same for every controller, so the chart's Role in
    the release namespace covers each of them."""
    env = os.environ.get("POD_NAMESPACE")
    if env:
        return env
    try:
        with open(_SA_NAMESPACE, encoding="utf-8") as f:
            return f.read().strip() or "default"
    except OSError:
        return "default"


@dataclass(frozen=True, slots=True)
class LeaderSettings:
    """The ``--leader-elect*`` flags (``mco.leader.add_leader_flags``), parsed."""

    enabled: bool = True
    lease_name: str = ""
    namespace: str | None = None  # None: the pod's own (own_namespace)
    identity: str = ""
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def elector_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``mco.leader.LeaseElector`` (besides the API client)."""
        return {
            "name": self.lease_name,
            "namespace": self.namespace or own_namespace(),
            "identity": self.identity,
            "lease_duration": self.lease_duration,
            "renew_deadline": self.renew_deadline,
            "retry_period": self.retry_period,
        }


def leader_settings(args: argparse.Namespace) -> LeaderSettings:
    if not (
        args.leader_elect_lease_duration
        > args.leader_elect_renew_deadline
        > args.leader_elect_retry_period
        > 0
    ):
        raise FlagError("leader election: need lease duration > renew deadline > retry period > 0")
    return LeaderSettings(
        enabled=args.leader_elect,
        lease_name=args.leader_elect_lease_name,
        namespace=args.leader_elect_namespace,
        identity=args.leader_elect_identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}",
        lease_duration=args.leader_elect_lease_duration,
        renew_deadline=args.leader_elect_renew_deadline,
        retry_period=args.leader_elect_retry_period,
    )
