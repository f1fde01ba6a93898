"""PromQL instant queries over HTTP, against any engine that speaks Prometheus' query API
(Prometheus, VictoriaMetrics, Thanos Querier, Grafana Mimir).

Every failure becomes a ``SourceError`` with a ``kind`` (for metrics) and a message that is safe
to log and to write into the report: it names the URL without credentials and never carries a
token, a password or a header value, even when the engine (or a proxy in front of it) echoes
them in its answer: every message passes ``PromQLClient.redact`` and is bounded in size.
"""

from __future__ import annotations

import base64
import ctypes
import os
import re
import ssl
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Generic, TypeVar
from urllib.parse import parse_qsl, quote, urlsplit, urlunsplit

import aiohttp
import msgspec

from mco.tlsclient import client_context


def _inflate_module() -> Any:
    """isal's zlib (same API, a faster inflate), else zlib itself."""
    try:
        from isal import isal_zlib  # type: ignore[import-untyped,unused-ignore]
    except ImportError:  # pragma: no cover - isal is a dependency
        return zlib
    return isal_zlib


_zlib: Any = _inflate_module()

T = TypeVar("T")

# Error kinds (the ``kind`` label of mco_reporter_errors_total).
UNREACHABLE: Final = "source_unreachable"
TIMEOUT: Final = "source_timeout"
QUERY_FAILED: Final = "source_error"
BAD_ANSWER: Final = "source_bad_answer"
TOO_LARGE: Final = "source_too_large"  # over --prometheus-max-answer-bytes
# Bytes of PromQL answers held in memory at once, all queries together (raw and inflated).
# Decoding adds up to ~2.5x what it decodes, so with the process's own ~70 MiB this stays
# under the chart's 256Mi limit; the three answers of a 10,000-node fleet take ~32 MiB.
DEFAULT_MAX_ANSWER_BYTES: Final = 48 << 20


_M_MMAP_THRESHOLD: Final = -3  # glibc's mallopt parameter


def mmap_large_buffers(threshold: int = 1 << 20) -> bool:
    """Have the C library serve every allocation over ``threshold`` with its own mapping (a
    fixed threshold: glibc's default rises after the first large free, up to 32 MiB, and then
    serves answer-sized buffers from the heap). Answers' buffers then grow by ``mremap``
    without a copy and go back to the kernel when freed, so what ``AnswerBudget`` gives back
    is really free. Measured: three chunked answers growing together peaked 85 MiB over the
    45 MiB counted without it, at the counted 45 MiB with it. False where there is no
    ``mallopt`` (not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold))


class AnswerBudget:
    """The bytes of answers in memory across a client's concurrent queries: each chunk is
    taken before it is kept, and given back when its query ends (however it ends)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def available(self) -> int:
        return self.limit - self.used

    def take(self, n: int) -> bool:
        if self.used + n > self.limit:
            return False
        self.used += n
        return True

    def give(self, n: int) -> None:
        self.used -= n


REDACTED: Final = "[redacted]"
MAX_MESSAGE: Final = 300  # characters of a SourceError message (it lands in the report)
# Credentials an echo may spell whatever their value: an Authorization header (as text, JSON or
# Go's map printing), an auth scheme and its credential, user info in a URL.
_ECHOED: Final = (
    (
        re.compile(r"(?i)\b((?:proxy-)?authorization)(\W{0,3}?[:=]\W{0,3})[^\r\n\"',;}\]]*"),
        rf"\1\2{REDACTED}",
    ),
    (
        re.compile(r"(?i)\b(bearer|basic|digest)(\s+)[A-Za-z0-9._~+/=-]{8,}"),
        rf"\1\2{REDACTED}",
    ),
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@\"']*@"), rf"\1{REDACTED}@"),
)


class SourceError(Exception):
    """The PromQL source did not give a usable answer."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True, slots=True)
class SourceConfig:
    url: str
    timeout: float = 5.0  # seconds for one query, connection included
    bearer_token_file: str | None = None
    basic_auth_user: str | None = None
    basic_auth_password_file: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure_skip_verify: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)  # e.g. X-Scope-OrgID
    compression: bool = True  # ask for gzip: ~10x fewer bytes on the wire for more CPU
    max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES  # in memory at once, all queries

    def validate(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"--prometheus-url must be an http(s) URL, got {safe_url(self.url)!r}")
        if self.bearer_token_file and (self.basic_auth_user or parts.username):
            raise ValueError("use either a bearer token or basic auth, not both")
        if self.basic_auth_password_file and not self.basic_auth_user:
            raise ValueError("a basic-auth password file needs --prometheus-basic-auth-user")
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("a client certificate needs both a cert and a key file")
        if self.timeout <= 0:
            raise ValueError("the query timeout must be positive")
        if self.max_answer_bytes <= 0:
            raise ValueError("--prometheus-max-answer-bytes must be positive")
        for name in self.headers:
            if name.lower() in _OWN_HEADERS or name.lower().startswith("content-"):
                raise ValueError(f"header {name!r} is set by the reporter itself")


# Headers the reporter writes itself: auth, the form body it POSTs (every Content-*), and the
# compression it inflates.
_OWN_HEADERS: Final = frozenset({"authorization", "host", "accept-encoding"})


def safe_url(url: str) -> str:
    """``url`` without user info, query string or fragment: fit for logs and reports."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class _Secret:
    """A file-backed secret (a projected token rotates): re-read when the file changes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._value = ""

    @property
    def cached(self) -> str:
        """The value last read (what was sent), without touching the file."""
        return self._value

    def value(self) -> str:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size)
            if stamp != self._stamp:
                with open(self.path, encoding="utf-8") as f:
                    self._value = f.read().strip()
                self._stamp = stamp
        except OSError as exc:
            # The message names the file, never its content.
            raise SourceError(UNREACHABLE, f"cannot read {self.path}: {exc.strerror}") from exc
        return self._value


class AnswerData(msgspec.Struct, Generic[T], gc=False):
    resultType: str  # the wire name
    result: list[T]


class Answer(msgspec.Struct, Generic[T], gc=False):
    status: str
    data: AnswerData[T] | None = None
    errorType: str = ""
    error: str = ""


class PromQLClient:
    """Instant queries over one pooled HTTP session; use as an async context manager."""

    def __init__(self, config: SourceConfig, budget: AnswerBudget | None = None) -> None:
        """``budget``: shared by the clients of several shards, so that the bound holds for
        all their answers together (default: this client's own)."""
        config.validate()
        self.config = config
        parts = urlsplit(config.url)
        self._endpoint = urlunsplit(
            (
                parts.scheme,
                parts.netloc.rpartition("@")[2],
                parts.path.rstrip("/") + "/api/v1/query",
                "",
                "",
            )
        )
        self._range_endpoint = self._endpoint + "_range"
        self.where = safe_url(config.url)
        self._token = _Secret(config.bearer_token_file) if config.bearer_token_file else None
        self._password = (
            _Secret(config.basic_auth_password_file) if config.basic_auth_password_file else None
        )
        self._basic_user = config.basic_auth_user or parts.username
        self._url_password = parts.password
        self._session: aiohttp.ClientSession | None = None
        self._decoders: dict[type, msgspec.json.Decoder[Any]] = {}
        self._budget = budget if budget is not None else AnswerBudget(config.max_answer_bytes)

    def _ssl(self) -> ssl.SSLContext | bool:
        c = self.config
        if not self._endpoint.startswith("https:"):
            return False
        return client_context(
            ca_file=c.ca_file,
            cert_file=c.cert_file,
            key_file=c.key_file,
            insecure_skip_verify=c.insecure_skip_verify,
        )

    async def __aenter__(self) -> PromQLClient:
        headers = dict(self.config.headers)
        headers["Accept-Encoding"] = "gzip" if self.config.compression else "identity"
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self._ssl(), limit=4),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=self.config.timeout),
            # Inflated in one call after the read (see inflate()): aiohttp's chunk-by-chunk
            # inflate of a 16 MiB answer costs about twice the CPU.
            auto_decompress=False,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _auth(self) -> dict[str, str]:
        if self._token is not None:
            return {"Authorization": f"Bearer {self._token.value()}"}
        if self._basic_user is not None:
            password = self._password.value() if self._password else (self._url_password or "")
            pair = base64.b64encode(f"{self._basic_user}:{password}".encode()).decode()
            return {"Authorization": f"Basic {pair}"}
        return {}

    def _excerpt(self, body: bytes | bytearray) -> str:
        """The start of a body that is not an answer (a proxy's page), redacted *before* it is
        cut, so a credential across the cut cannot leave a readable prefix."""
        text = self.redact_all(body[:4096].decode("utf-8", "replace"))
        return text[:200].strip() or "(empty body)"

    def redact_all(self, text: str) -> str:
        """``redact`` without the size bound."""
        for pattern, replacement in _ECHOED:
            text = pattern.sub(replacement, text)
        for secret in self._secrets():
            text = text.replace(secret, REDACTED)
        return text

    def _decoder(self, sample: type[T]) -> msgspec.json.Decoder[Answer[T]]:
        decoder = self._decoders.get(sample)
        if decoder is None:
            # strict=False: values arrive as strings ("0.25"); msgspec turns them into floats
            # while decoding instead of building a Python str per sample.
            decoder = msgspec.json.Decoder(Answer[sample], strict=False)  # type: ignore[valid-type]
            self._decoders[sample] = decoder
        return decoder

    def _secrets(self) -> list[str]:
        """Every credential this client sends or was configured with, as text an echo could
        hold (plain, URL-encoded, and the basic-auth pair both ways); longest first."""
        values = [v for v in self.config.headers.values()]
        values += [v for _, v in parse_qsl(urlsplit(self.config.url).query)]
        if self._token is not None:
            values.append(self._token.cached)
        if self._basic_user is not None:
            password = self._password.cached if self._password else (self._url_password or "")
            pair = f"{self._basic_user}:{password}"
            values += [password, pair, base64.b64encode(pair.encode()).decode()]
        values += [quote(v, safe="") for v in values]
        return sorted({v for v in values if v}, key=len, reverse=True)

    def redact(self, text: str) -> str:
        """``text`` without any credential of this client, nor what looks like one (an
        Authorization header, a scheme's credential, user info in a URL); at most
        ``MAX_MESSAGE`` characters."""
        text = self.redact_all(text)
        return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"

    async def query(
        self, expr: str, at: float, sample: type[T], loose: type[T] | None = None
    ) -> tuple[list[T], int]:
        """The instant vector of ``expr`` at Unix time ``at``, decoded as ``sample`` structs,
        and the size of the answer in bytes. Raises SourceError, its message redacted.

        ``sample`` may be strict (label values from a closed set, decoded without allocating);
        when the answer does not fit it, ``loose`` (plain strings) is tried before giving up."""
        form = {"query": expr, "time": f"{at:.3f}"}
        try:
            return await self._query(self._endpoint, form, "vector", sample, loose)
        except SourceError as exc:
            exc.message = self.redact(exc.message)
            exc.args = (exc.message,)
            raise

    async def query_range(
        self, expr: str, start: float, end: float, step: float, series: type[T]
    ) -> tuple[list[T], int]:
        """The range vector of ``expr`` (``/api/v1/query_range``), each series decoded as a
        ``series`` struct (``metric`` and ``values``), and the answer's size in bytes; the
        same limits and errors as ``query``."""
        form = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        try:
            return await self._query(self._range_endpoint, form, "matrix", series, None)
        except SourceError as exc:
            exc.message = self.redact(exc.message)
            exc.args = (exc.message,)
            raise

    async def _query(
        self,
        endpoint: str,
        form: dict[str, str],
        result_type: str,
        sample: type[T],
        loose: type[T] | None,
    ) -> tuple[list[T], int]:
        if self._session is None:
            raise RuntimeError("PromQLClient used outside `async with`")
        budget = self._budget
        held = 0  # bytes of this answer counted in the budget, given back when it is parsed
        raw = bytearray()
        body: bytes | bytearray = b""
        try:
            try:
                async with self._session.post(endpoint, data=form, headers=self._auth()) as r:
                    status = r.status
                    encoding = r.headers.get("Content-Encoding", "identity").strip().lower()
                    declared = r.content_length
                    if declared is not None and declared > budget.available():
                        raise self._too_large(f"declares {declared} bytes")
                    # Read as it arrives, counting every chunk: never more than the budget
                    # in memory, whatever the answer claims or sends.
                    async for chunk in r.content.iter_any():
                        if not budget.take(len(chunk)):
                            raise self._too_large("is larger")
                        held += len(chunk)
                        raw += chunk
            except TimeoutError as exc:
                raise SourceError(
                    TIMEOUT, f"no answer from {self.where} within {self.config.timeout:g}s"
                ) from exc
            except (aiohttp.ClientError, OSError) as exc:
                raise SourceError(
                    UNREACHABLE, f"cannot reach {self.where}: {_describe(exc)}"
                ) from exc
            body, raw = raw, bytearray()
            if encoding not in ("", "identity"):
                # The raw answer and what it inflates to are held together for a moment.
                raw_size = held
                body = inflate(body, encoding, self.where, budget.available(), budget.limit)
                budget.take(len(body))  # fits: inflate stops at what is available
                budget.give(raw_size)  # the raw answer is gone
                held = len(body)
            if b'"+Inf"' in body:  # Go's spelling; msgspec reads "Inf" but not "+Inf"
                if isinstance(body, bytes):  # respelled in a mutable copy, counted too
                    if not budget.take(len(body)):
                        raise self._too_large("needs more room to respell +Inf")
                    held += len(body)
                    body = bytearray(body)
                _respell_inf(body)
            return self._decode(body, status, result_type, sample, loose)
        finally:
            # The buffers go now, not with the exception's traceback (which keeps this frame,
            # and would keep them, until the error is dropped): what is given back is free.
            raw = bytearray()
            body = b""
            budget.give(held)

    def _too_large(self, what: str) -> SourceError:
        limit = self._budget.limit
        return SourceError(
            TOO_LARGE,
            f"{self.where}'s answer {what}, over the {_mib(limit)} that answers may hold in "
            "memory at once (--prometheus-max-answer-bytes, all queries together): refused",
        )

    def _decode(
        self,
        body: bytes | bytearray,
        status: int,
        result_type: str,
        sample: type[T],
        loose: type[T] | None,
    ) -> tuple[list[T], int]:
        try:
            try:
                answer = self._decoder(sample).decode(body)
            except msgspec.ValidationError:
                if loose is None or status != 200:
                    raise
                answer = self._decoder(loose).decode(body)
        except msgspec.DecodeError as exc:
            if status != 200:
                raise SourceError(
                    QUERY_FAILED, f"{self.where} answered HTTP {status}: {self._excerpt(body)}"
                ) from exc
            raise SourceError(BAD_ANSWER, f"{self.where} sent an invalid answer: {exc}") from exc
        if answer.status != "success" or answer.data is None:
            reason = f"{answer.errorType}: {answer.error}" if answer.errorType else answer.error
            raise SourceError(
                QUERY_FAILED, f"{self.where} answered HTTP {status}: {reason or 'no data'}"
            )
        if answer.data.resultType != result_type:
            raise SourceError(
                BAD_ANSWER,
                f"{self.where} answered a {answer.data.resultType}, not a {result_type}",
            )
        return answer.data.result, len(body)


_WBITS: Final = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": 32 + 15}


def inflate(
    body: bytes | bytearray, encoding: str, where: str, limit: int, budget: int | None = None
) -> bytes:
    """A compressed answer, inflated in one call (isal's inflate where installed: ~1.5x
    faster than zlib's) to at most ``limit`` bytes (what is left of the ``budget``);
    SourceError when it is not valid or inflates to more (a gzip bomb stops at the limit)."""
    wbits = _WBITS.get(encoding)
    if wbits is None:
        raise SourceError(BAD_ANSWER, f"{where} answered in an unknown encoding {encoding!r}")
    try:
        inflater = _zlib.decompressobj(wbits=wbits)
        out: bytes = inflater.decompress(body, max(limit, 1))
        if inflater.unconsumed_tail:
            del out, inflater  # not kept alive by the traceback
            raise SourceError(
                TOO_LARGE,
                f"{where}'s {encoding} answer inflates past the {_mib(budget or limit)} that "
                "answers may hold in memory at once (--prometheus-max-answer-bytes, all "
                "queries together): refused",
            )
        if not inflater.eof:
            raise SourceError(BAD_ANSWER, f"{where} sent a truncated {encoding} answer")
    except (zlib.error, _zlib.error) as exc:
        raise SourceError(BAD_ANSWER, f"{where} sent an invalid {encoding} answer: {exc}") from exc
    return out


def _respell_inf(body: bytearray) -> None:
    """``"+Inf"`` as ``"Inf"`` in place (same length: JSON allows the space before it)."""
    i = body.find(b'"+Inf"')
    while i >= 0:
        body[i : i + 6] = b' "Inf"'
        i = body.find(b'"+Inf"', i + 6)


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.4g} MiB"


def _describe(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__  # bounded by redact(), after redaction
