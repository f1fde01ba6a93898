"""One vocabulary for a failed Kubernetes API call, shared by every part that talks to the API.

Each failure is an ``ApiError`` subclass whose ``kind`` says how to react: re-read and retry
(``conflict``), create again (``not_found``), list again (``gone``), back off (``throttled``,
``server_error``, ``connection``, ``malformed``) or give up on this write (``invalid``,
``too_large``, ``forbidden``). The kinds are the ``kind`` labels of the error self-metrics and
the ``kind`` field of the log lines, the same word in the reporter, the rulegen controller and
the extender (kopf's ``clients/errors.py`` in miniature).
"""

from __future__ import annotations

from typing import ClassVar, Final

import aiohttp
import msgspec
from kubernetes_asyncio.client.exceptions import ApiException

CONFLICT: Final = "conflict"
NOT_FOUND: Final = "not_found"
GONE: Final = "gone"
INVALID: Final = "invalid"
TOO_LARGE: Final = "too_large"
FORBIDDEN: Final = "forbidden"
THROTTLED: Final = "throttled"
SERVER_ERROR: Final = "server_error"
CONNECTION: Final = "connection"
# An answer that is not what was asked for (an object edited past its schema, a broken
# stream): reported and backed off like a server error, never a crash.
MALFORMED: Final = "malformed"
KINDS: Final = (
    CONFLICT,
    NOT_FOUND,
    GONE,
    INVALID,
    TOO_LARGE,
    FORBIDDEN,
    THROTTLED,
    SERVER_ERROR,
    CONNECTION,
    MALFORMED,
)
# After these the written state is unknown: read the object again before the next write.
UNCERTAIN: Final = frozenset({GONE, SERVER_ERROR, CONNECTION, THROTTLED, MALFORMED})


class ApiError(Exception):
    """A Kubernetes API call failed; ``kind`` names the class of failure."""

    kind: ClassVar[str] = SERVER_ERROR

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{self.kind} (HTTP {status}): {message}")
        self.status = status
        self.message = message


class Conflict(ApiError):
    kind = CONFLICT


class NotFound(ApiError):
    kind = NOT_FOUND


class Gone(ApiError):
    """The resourceVersion is older than the API server keeps: list again."""

    kind = GONE


class Invalid(ApiError):
    kind = INVALID


class TooLarge(ApiError):
    kind = TOO_LARGE


class Forbidden(ApiError):
    kind = FORBIDDEN


class Throttled(ApiError):
    kind = THROTTLED


class ServerError(ApiError):
    kind = SERVER_ERROR


class Unreachable(ApiError):
    """No answer: connection refused or lost, TLS failure, timeout."""

    kind = CONNECTION


class Malformed(ApiError):
    kind = MALFORMED


def api_error(status: int, message: str) -> ApiError:
    """The error an HTTP status (and the Status message with it) means."""
    if status == 409:
        return Conflict(status, message)
    if status == 404:
        return NotFound(status, message)
    if status == 410:
        return Gone(status, message)
    if status == 413 or "too large" in message.lower():
        return TooLarge(status, message)
    if status in (400, 415, 422):
        return Invalid(status, message)
    if status in (401, 403):
        return Forbidden(status, message)
    if status == 429:
        return Throttled(status, message)
    return ServerError(status, message)


class _Status(msgspec.Struct):
    message: str = ""
    reason: str = ""


_status = msgspec.json.Decoder(_Status)


def status_error(status: int, body: bytes) -> ApiError:
    """The error of a non-2xx answer, with the message of its ``Status`` body when it has one."""
    try:
        detail = _status.decode(body)
        message = detail.message or detail.reason
    except msgspec.DecodeError:
        message = body[:200].decode("utf-8", "replace")
    return api_error(status, message)


def classify(exc: BaseException) -> ApiError | None:
    """The ApiError an exception raised by an API call means; None for anything else (a bug)."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        reason = str(exc.reason or "")
        body: object = exc.body
        if isinstance(body, str):
            body = body.encode()
        if isinstance(body, bytes) and body:
            return api_error(status, status_error(status, body).message or reason)
        return api_error(status, reason)
    if isinstance(exc, aiohttp.ClientResponseError):
        return api_error(exc.status, exc.message)
    if isinstance(exc, TimeoutError):
        return Unreachable(0, "no answer in time")
    if isinstance(exc, aiohttp.ClientError | OSError):
        return Unreachable(0, str(exc) or type(exc).__name__)
    if isinstance(exc, msgspec.DecodeError | UnicodeDecodeError):
        return Malformed(200, str(exc))
    return None
