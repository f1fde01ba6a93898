"""Request bodies read within two bounds: one body's size, and all bodies held at once.

Memory follows the bytes that actually arrived, never a declared ``Content-Length``: ten
connections that announce 64 MiB and send one byte hold ten bytes. Every byte kept is taken
from a process-wide `BodyBudget` first; when it is spent the request is refused with 503
rather than the pod being OOM-killed, and a body is dropped (and its bytes given back) the
moment its connection fails.

A request whose bytes aiohttp's own parser refuses (a Content-Encoding it cannot decode, such
as ``br`` or ``zstd`` without their libraries, or a deflate stream that ends early) never
reaches a handler: aiohttp answers 400 itself and logs the failure at ERROR with a traceback.
`quiet_bad_requests` turns those records into one line at DEBUG, so a client cannot flood the
log with tracebacks of its own bad requests.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from extender.wire import BadRequest, Body

log = logging.getLogger("mco.extender")

_MESSAGE_CHARS = 200  # of the parser's message, which may quote the client's bytes


class _BadRequestRecords(logging.Filter):
    """Drops aiohttp's ERROR record for a request its parser refused with a 4xx, logging one
    line at DEBUG instead; every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if not isinstance(exc, HttpProcessingError) or not 400 <= exc.code < 500:
            return True
        remote = record.args[0] if isinstance(record.args, tuple) and record.args else None
        text = " ".join(str(exc.message).split())[:_MESSAGE_CHARS]
        log.debug("answered %d to a bad request from %s: %r", exc.code, remote, text)
        return False


def quiet_bad_requests() -> None:
    """Install the filter on aiohttp's server logger, once per process."""
    server = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _BadRequestRecords) for f in server.filters):
        server.addFilter(_BadRequestRecords())


class BodyBudget:
    """Bytes of request bodies held at once by this process, and how many may be."""

    __slots__ = ("capacity", "held")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held = 0

    def take(self, size: int) -> None:
        if self.held + size > self.capacity:
            raise BudgetExhausted(
                f"request bodies in flight would exceed {self.capacity} bytes; try again"
            )
        self.held += size

    def give(self, size: int) -> None:
        self.held -= size


class BudgetExhausted(Exception):
    """Too many body bytes in flight at once: answered with 503 (a scheduler retries or, with
    ``ignorable: true``, carries on without the extender)."""


# What reading a body raises when the bytes themselves are bad: a Content-Encoding that does
# not decode (aiohttp wraps any payload failure in RequestPayloadError), a broken chunked
# encoding, a body shorter than its Content-Length.
_UNREADABLE = (web.RequestPayloadError, HttpProcessingError)


async def read_body(request: web.Request, limit: int, budget: BodyBudget) -> Body:
    """The whole (decoded) body, at most ``limit`` bytes, its size taken from ``budget``.

    The caller gives ``len(body)`` back once done with it. A body that arrives in one chunk is
    used as it is; a longer one grows a bytearray chunk by chunk (realloc, no second copy as
    aiohttp's ``read()`` makes). On any failure the bytes are given back and the buffer is
    dropped before the exception leaves, so a traceback kept somewhere (aiohttp stores the
    connection's exception on its stream, which this frame references) holds no body.
    """
    length = request.content_length
    if length is not None and length > limit:
        raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=length)
    content = request.content
    held = 0
    body: Body = b""
    try:
        body = await content.readany()
        budget.take(len(body))
        held = len(body)
        if content.at_eof():
            return body
        body = bytearray(body)
        while chunk := await content.readany():
            size = held + len(chunk)
            if size > limit:
                raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=size)
            budget.take(len(chunk))
            held = size
            body += chunk
        return body
    except _UNREADABLE as exc:
        budget.give(held)
        body = b""  # the bytes go before the traceback that names this frame is kept
        raise BadRequest(f"unreadable request body: {exc}") from None
    except BaseException:
        budget.give(held)
        body = b""
        raise
