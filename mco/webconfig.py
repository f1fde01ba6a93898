"""``--web.config.file``: the exporter-toolkit web configuration, read by every MCO server.

The same YAML node_exporter, Prometheus and Alertmanager read (exporter-toolkit's
docs/web-configuration.md), so an operator secures all of them one way::

    tls_server_config: {cert_file, key_file, client_ca_file, client_auth_type,
                        min_version, max_version}
    basic_auth_users: {user: bcrypt hash}
    auth_excluded_paths: [/healthz, ...]
    http_server_config: {headers: {...}}

As in the toolkit: unknown keys are an error, relative paths are relative to the file's
directory, a file without ``tls_server_config`` serves plain HTTP (still with basic auth and
headers), basic auth applies to every path but those in ``auth_excluded_paths`` (the
toolkit's key, which the chart uses for kubelet probes), and a bcrypt verification is cached per
(user, hash, password) because bcrypt is slow on purpose (costs above ``MAX_BCRYPT_COST`` are
refused; ``BasicAuth``). Renewed certificate files are
loaded into the live context (``CertificateReloader``; the toolkit re-reads them per
connection). One ``WebConfig`` gives the
``ssl.SSLContext`` and the authentication and headers, as a WSGI wrapper (``wsgi``, the
exporter's prometheus_client server) or, in ``mco.webserver``, an aiohttp middleware. This
module imports neither aiohttp nor asyncio: the exporter, on every node, pays only for what it
serves with.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import re
import ssl
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import bcrypt
import yaml

# Python's ssl cannot ask for a client certificate and then accept it unverified, so the two
# toolkit policies that do (RequestClientCert without a CA, RequireAnyClientCert) are refused
# with a reason rather than silently weakened or strengthened.
CLIENT_AUTH: Final = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_UNVERIFIED_AUTH: Final = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
TLS_VERSIONS: Final = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# exporter-toolkit's list: only these headers, and only these values where it names them.
HEADERS: Final[Mapping[str, tuple[str, ...]]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
_TOP_KEYS: Final = (
    "tls_server_config",
    "http_server_config",
    "basic_auth_users",
    "auth_excluded_paths",
)
_TLS_KEYS: Final = (
    "cert_file",
    "key_file",
    "client_ca_file",
    "client_auth_type",
    "min_version",
    "max_version",
)
# Toolkit keys MCO does not implement: refused by name so the reason is not "unknown key".
_TLS_UNSUPPORTED: Final = (
    "cert",
    "key",
    "client_ca",
    "cipher_suites",
    "curve_preferences",
    "prefer_server_cipher_suites",
    "client_allowed_sans",
)
_HTTP_KEYS: Final = ("headers", "http2")
_BCRYPT: Final = re.compile(r"\$2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}")
_CACHE_SIZE: Final = 100
# exporter-toolkit's users pick 10-14; a check doubles per step and takes ~1 s of a core at
# 14 (already the scrape timeout), so a higher cost only lets one guess hold a core longer.
MAX_BCRYPT_COST: Final = 14
BCRYPT_AT_ONCE: Final = 2  # concurrent checks: what a flood of wrong guesses can cost
log = logging.getLogger("mco.webconfig")


class WebConfigError(ValueError):
    """The web configuration is unusable; the message names the file and the key."""


@dataclass(frozen=True, slots=True)
class TLSServerConfig:
    cert_file: str
    key_file: str
    client_ca_file: str | None = None
    client_auth_type: str = "NoClientCert"
    min_version: str = "TLS12"
    max_version: str = "TLS13"

    def context(self) -> ssl.SSLContext:
        """A server context; raises WebConfigError (files, policy) with a one-line reason."""
        if self.client_auth_type in _UNVERIFIED_AUTH:
            raise WebConfigError(
                f"client_auth_type {self.client_auth_type} accepts unverified client "
                "certificates, which MCO cannot do: use RequireAndVerifyClientCert "
                "(or VerifyClientCertIfGiven) with client_ca_file"
            )
        if self.client_auth_type not in CLIENT_AUTH:
            raise WebConfigError(
                f"client_auth_type must be one of {', '.join(CLIENT_AUTH)}, "
                f"got {self.client_auth_type!r}"
            )
        verify = CLIENT_AUTH[self.client_auth_type]
        if self.client_ca_file and verify == ssl.CERT_NONE:
            raise WebConfigError("client_ca_file is set but client_auth_type is NoClientCert")
        if verify != ssl.CERT_NONE and not self.client_ca_file:
            raise WebConfigError(f"client_auth_type {self.client_auth_type} needs client_ca_file")
        for key in ("min_version", "max_version"):
            if getattr(self, key) not in TLS_VERSIONS:
                raise WebConfigError(
                    f"{key} must be one of {', '.join(TLS_VERSIONS)}, got {getattr(self, key)!r}"
                )
        low, high = TLS_VERSIONS[self.min_version], TLS_VERSIONS[self.max_version]
        if low > high:
            raise WebConfigError("min_version is above max_version")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version, ctx.maximum_version = low, high
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise WebConfigError(
                f"cannot load cert_file {self.cert_file} / key_file {self.key_file}: {_why(exc)}"
            ) from exc
        if self.client_ca_file:
            try:
                ctx.load_verify_locations(cafile=self.client_ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise WebConfigError(
                    f"cannot load client_ca_file {self.client_ca_file}: {_why(exc)}"
                ) from exc
        ctx.verify_mode = verify
        return ctx

    def files(self) -> tuple[str, ...]:
        return tuple(f for f in (self.cert_file, self.key_file, self.client_ca_file) if f)


def _stamp(paths: Iterable[str]) -> tuple[tuple[int, int], ...]:
    """What changes when a file is replaced (a Secret volume swaps a symlink): mtime and size."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((-1, -1))
        else:
            out.append((st.st_mtime_ns, st.st_size))
    return tuple(out)


class CertificateReloader:
    """Loads renewed certificate, key and client CA files into the live context.

    exporter-toolkit reads them again on every connection; MCO checks every
    ``RELOAD_SECONDS`` and loads them into the same ``SSLContext`` (servers cannot swap
    theirs), after a fresh context proved the new pair consistent, so a half-written rotation
    is never served. A CA removed from ``client_ca_file`` stays trusted until a restart.
    """

    def __init__(self, tls: TLSServerConfig, context: ssl.SSLContext) -> None:
        self._tls, self._context = tls, context
        self._stamp = _stamp(tls.files())

    def reload_if_changed(self) -> bool:
        """True when new files were loaded; a bad new set is logged and the old one kept."""
        stamp = _stamp(self._tls.files())
        if stamp == self._stamp:
            return False
        try:
            self._tls.context()  # the new files, checked on a context nobody serves with
            self._context.load_cert_chain(self._tls.cert_file, self._tls.key_file)
            if self._tls.client_ca_file:
                self._context.load_verify_locations(cafile=self._tls.client_ca_file)
        except (WebConfigError, OSError, ssl.SSLError) as exc:
            log.warning("cannot reload TLS certificates; serving the old ones",
                        extra={"err": _why(exc)})  # fmt: skip
            return False
        self._stamp = stamp
        log.info("TLS certificates reloaded", extra={"cert_file": self._tls.cert_file})
        return True


RELOAD_SECONDS: Final = 30.0


@dataclass(frozen=True, slots=True)
class WebConfig:
    """What a server needs from ``--web.config.file``: build it with ``load`` or ``tls_files``."""

    tls: TLSServerConfig | None = None
    users: Mapping[str, str] = field(default_factory=dict)  # user -> bcrypt hash
    headers: Mapping[str, str] = field(default_factory=dict)
    auth_excluded_paths: frozenset[str] = frozenset()  # exact paths served without basic auth
    source: str = ""  # the file, for messages; "" when nothing was configured
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False, repr=False)
    auth: BasicAuth | None = field(default=None, compare=False, repr=False)
    reloader: CertificateReloader | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.tls is not None and self.ssl_context is None:
            context = self.tls.context()
            object.__setattr__(self, "ssl_context", context)
            object.__setattr__(self, "reloader", CertificateReloader(self.tls, context))
        if self.users and self.auth is None:
            object.__setattr__(self, "auth", BasicAuth(self.users))

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    @property
    def plain(self) -> bool:
        """Nothing to do per request: no authentication and no extra headers."""
        return self.auth is None and not self.headers


@dataclass(frozen=True, slots=True)
class WebSettings:
    """Where a server listens and how it is secured (``--web.config.file``)."""

    host: str
    port: int
    config: WebConfig = field(default_factory=WebConfig)

    @property
    def address(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def bind_host(self) -> str | None:
        """For asyncio/aiohttp: None binds every interface, IPv4 and IPv6 (one socket each)."""
        return self.host or None


def load(path: str) -> WebConfig:
    """Read and validate a web configuration file; WebConfigError says what is wrong."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f)
    except OSError as exc:
        raise WebConfigError(f"cannot read {path}: {_why(exc)}") from exc
    except yaml.YAMLError as exc:
        raise WebConfigError(f"{path}: not YAML: {_why(exc)}") from exc
    try:
        return _parse(doc or {}, os.path.dirname(os.path.abspath(path)), path)
    except WebConfigError as exc:
        raise WebConfigError(f"{path}: {exc}") from exc


def tls_files(cert_file: str | None, key_file: str | None, client_ca_file: str | None) -> WebConfig:
    """The in-memory equivalent of the deprecated ``--tls-*`` flags: a client CA meant
    "require certificates it signed"."""
    if cert_file is None and key_file is None and client_ca_file is None:
        return WebConfig()
    if cert_file is None or key_file is None:
        raise WebConfigError("TLS needs both a certificate and a key file")
    tls = TLSServerConfig(
        cert_file,
        key_file,
        client_ca_file,
        "RequireAndVerifyClientCert" if client_ca_file else "NoClientCert",
    )
    return WebConfig(tls=tls, source="deprecated TLS flags")


def _parse(doc: object, base: str, source: str) -> WebConfig:
    top = _mapping(doc, "the file", _TOP_KEYS)
    tls_doc = top.get("tls_server_config")
    tls = None
    if tls_doc is not None:
        raw = _mapping(tls_doc, "tls_server_config", _TLS_KEYS, _TLS_UNSUPPORTED)
        values = {k: _string(v, f"tls_server_config.{k}") for k, v in raw.items() if v is not None}
        if any(values.values()):  # the toolkit serves plain HTTP when the section is empty
            for key in ("cert_file", "key_file"):
                if not values.get(key):
                    raise WebConfigError(f"tls_server_config.{key} is missing")
            for key in ("cert_file", "key_file", "client_ca_file"):
                if values.get(key):
                    values[key] = os.path.join(base, values[key])
            tls = TLSServerConfig(
                **{k: v for k, v in values.items() if v or k in ("cert_file", "key_file")}
            )
    http = _mapping(top.get("http_server_config") or {}, "http_server_config", _HTTP_KEYS)
    headers = _mapping(http.get("headers") or {}, "http_server_config.headers", None)
    for name, value in headers.items():
        text = _string(value, f"header {name}")
        if name not in HEADERS:
            raise WebConfigError(f"HTTP header {name!r} can not be configured")
        allowed = HEADERS[name]
        if allowed and text not in allowed:
            raise WebConfigError(f"header {name} must be one of {', '.join(allowed)}, got {text!r}")
        if "\n" in text or "\r" in text:
            raise WebConfigError(f"header {name} contains a line break")
    excluded = top.get("auth_excluded_paths") or []
    if not isinstance(excluded, list) or not all(
        isinstance(p, str) and p.startswith("/") for p in excluded
    ):
        raise WebConfigError("auth_excluded_paths must be a list of paths like /healthz")
    users = _mapping(top.get("basic_auth_users") or {}, "basic_auth_users", None)
    for user, hashed in users.items():
        if not isinstance(user, str) or not user or ":" in user:
            raise WebConfigError(f"basic_auth_users: bad user name {user!r}")
        if not isinstance(hashed, str) or not _BCRYPT.fullmatch(hashed):
            raise WebConfigError(f"basic_auth_users.{user} is not a bcrypt hash")
        check_cost(user, hashed)
    return WebConfig(
        tls=tls,
        users={str(u): str(h) for u, h in users.items()},
        headers={str(k): str(v) for k, v in headers.items()},
        auth_excluded_paths=frozenset(excluded),
        source=source,
    )


def _mapping(
    value: object,
    where: str,
    keys: Iterable[str] | None,
    unsupported: Iterable[str] = (),
) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WebConfigError(f"{where} must be a mapping")
    if keys is not None:
        for key in value:
            if key in unsupported:
                raise WebConfigError(f"{where}.{key} is not supported by MCO")
            if key not in keys:
                raise WebConfigError(f"unknown key {key!r} in {where}")
    return value


def _string(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise WebConfigError(f"{where} must be a string")
    return value


def _why(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc)
    return " ".join(str(text).split())[:300]


class BasicAuth:
    """``Authorization: Basic`` against bcrypt hashes, as exporter-toolkit checks it.

    bcrypt is deliberately slow (tens of ms at cost 10, ~1 s at 14), so verdicts are cached
    per (user, hash, password digest): a password that passed once is kept for as long as its
    hash is configured (one per user, so no guess evicts it), wrong ones in a bounded cache.
    The cache is read without a lock, so a known password is a dict lookup while others
    guess; at most ``BCRYPT_AT_ONCE`` checks run at a time (bcrypt releases the GIL), so a
    flood of guesses costs at most that many cores. An unknown user is checked against a
    decoy hash made at the *lowest* configured cost (never dearer than a real check, as
    exporter-toolkit's fixed cost-10 decoy), so timing does not tell which users exist.
    Costs above ``MAX_BCRYPT_COST`` are refused (``WebConfigError``).
    """

    def __init__(self, users: Mapping[str, str]) -> None:
        for user, hashed in users.items():
            check_cost(user, hashed)
        self._users = {u: h.encode() for u, h in users.items()}
        self._passed: dict[tuple[str, bytes, bytes], bool] = {}  # at most one per user
        self._failed: dict[tuple[str, bytes, bytes], bool] = {}  # bounded: _CACHE_SIZE
        self._lock = threading.Lock()  # only around cache writes, never around bcrypt
        self._slots = threading.BoundedSemaphore(BCRYPT_AT_ONCE)
        self._decoy = (
            bcrypt.hashpw(b"decoy", bcrypt.gensalt(rounds=min(map(_cost_of, users.values()))))
            if users
            else b""
        )

    def cached(self, header: str | None) -> bool | None:
        """The cached verdict for this header, or None when bcrypt has to run."""
        creds = _credentials(header)
        if creds is None:
            return False
        return self._known(self._key(*creds))

    def _known(self, key: tuple[str, bytes, bytes]) -> bool | None:
        if key in self._passed:
            return True
        return self._failed.get(key)

    def verify(self, header: str | None) -> bool:
        """Blocking; callers on an event loop run it in a thread (``mco.webserver``)."""
        creds = _credentials(header)
        if creds is None:
            return False
        user, password = creds
        key = self._key(user, password)
        if (known := self._known(key)) is not None:
            return known
        hashed = self._users.get(user)
        with self._slots:
            if (known := self._known(key)) is not None:  # checked meanwhile by another thread
                return known
            try:
                ok = bcrypt.checkpw(password, hashed or self._decoy) and hashed is not None
            except ValueError:  # a password bcrypt refuses (over 72 bytes)
                ok = False
        with self._lock:
            if ok:
                self._passed[key] = True
            else:
                while len(self._failed) >= _CACHE_SIZE:
                    self._failed.pop(next(iter(self._failed)))
                self._failed[key] = False
        return ok

    def _key(self, user: str, password: bytes) -> tuple[str, bytes, bytes]:
        return user, self._users.get(user, b""), hashlib.sha256(password).digest()


def _cost_of(hashed: str) -> int:
    return int(hashed.split("$")[2])


def check_cost(user: str, hashed: str) -> None:
    """Refuse a cost whose every check would hold a core for seconds (WebConfigError)."""
    cost = _cost_of(hashed)
    if cost > MAX_BCRYPT_COST:
        raise WebConfigError(
            f"basic_auth_users.{user}: bcrypt cost {cost} is above {MAX_BCRYPT_COST}: each "
            f"check would take ~{2 ** (cost - MAX_BCRYPT_COST)} s of a core; make the hash "
            f"with a cost of 10-{MAX_BCRYPT_COST} (htpasswd -nBC 10)"
        )


def _credentials(header: str | None) -> tuple[str, bytes] | None:
    if not header:
        return None
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None
    user, sep, password = decoded.partition(b":")
    if not sep:
        return None
    return user.decode("utf-8", "replace"), password


UNAUTHORIZED: Final = {"WWW-Authenticate": "Basic"}


_WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def wsgi(app: _WSGIApp, config: WebConfig) -> _WSGIApp:
    """The same authentication and headers around a WSGI application."""
    if config.plain:
        return app
    extra = list(config.headers.items())

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        def start(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            return start_response(status, headers + extra, *exc)

        if (
            config.auth is not None
            and environ.get("PATH_INFO", "") not in config.auth_excluded_paths
            and not config.auth.verify(environ.get("HTTP_AUTHORIZATION"))
        ):
            start("401 Unauthorized", [("Content-Type", "text/plain"), *UNAUTHORIZED.items()])
            return [b"Unauthorized\n"]
        return app(environ, start)

    return wrapped
