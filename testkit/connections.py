"""A burst of TCP connections opened at once and held idle: what a connection flood (or a
fleet of scrapers restarting together) does to a server's listen backlog and accept loop."""

from __future__ import annotations

import errno
import selectors
import socket
import time


def open_burst(
    host: str, port: int, count: int, timeout: float = 60.0
) -> tuple[list[socket.socket], float]:
    """``count`` connections to ``(host, port)``, all started before any is waited for; the
    sockets (connected, idle, non-blocking) and the seconds until the last one was
    established. A connection the server refused or reset raises ``ConnectionError``; one
    still pending after ``timeout`` raises ``TimeoutError``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sel = selectors.DefaultSelector()
    socks: list[socket.socket] = []
    start = time.perf_counter()
    try:
        for _ in range(count):
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setblocking(False)
            socks.append(sock)
            code = sock.connect_ex((host, port))
            if code not in (0, errno.EINPROGRESS):
                raise ConnectionError(f"connect: {errno.errorcode.get(code, code)}")
            sel.register(sock, selectors.EVENT_WRITE)
        pending = len(socks)
        while pending:
            left = timeout - (time.perf_counter() - start)
            if left <= 0:
                raise TimeoutError(f"{pending} of {count} connections still pending")
            for key, _ in sel.select(left):
                done = key.fileobj
                assert isinstance(done, socket.socket)
                code = done.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    raise ConnectionError(f"connect: {errno.errorcode.get(code, code)}")
                sel.unregister(done)
                pending -= 1
        return socks, time.perf_counter() - start
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    finally:
        sel.close()


def still_open(socks: list[socket.socket]) -> int:
    """How many of ``socks`` the server has not closed (no EOF, no reset)."""
    alive = 0
    for sock in socks:
        try:
            if sock.recv(1, socket.MSG_PEEK) == b"":
                continue
        except BlockingIOError:
            pass  # nothing to read: still open
        except OSError:
            continue
        alive += 1
    return alive
