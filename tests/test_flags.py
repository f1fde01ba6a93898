"""The flag values every console script shares (``mco.flags``), and that each script rejects a
bad one with exit status 2 and a message instead of a traceback."""

from __future__ import annotations

import argparse

import pytest

from exporter.cli import main as exporter_main
from extender.cli import main as extender_main
from mco.flags import FlagError, duration, listen_address, size
from reporter.cli import build_parser as reporter_parser
from reporter.cli import run as reporter_run
from rulegen.cli import main as rulegen_main


@pytest.mark.parametrize(
    "text,seconds",
    [("250ms", 0.25), ("1s", 1.0), ("1.5s", 1.5), ("2m", 120.0), ("1h", 3600.0), ("7", 7.0),
     ("1.5", 1.5), (" 30s ", 30.0)],
)  # fmt: skip
def test_durations(text: str, seconds: float) -> None:
    assert duration(text) == seconds


@pytest.mark.parametrize(
    "text,count",
    [("1048576", 1 << 20), ("900Ki", 900 << 10), ("1Mi", 1 << 20), ("64MiB", 64 << 20),
     ("1GiB", 1 << 30), ("2K", 2048), ("3M", 3 << 20), ("10B", 10)],
)  # fmt: skip
def test_sizes(text: str, count: int) -> None:
    assert size(text) == count


@pytest.mark.parametrize(
    "text,address",
    [(":9847", ("", 9847)), ("127.0.0.1:0", ("127.0.0.1", 0)),
     ("[::1]:9848", ("::1", 9848))],
)  # fmt: skip
def test_listen_addresses(text: str, address: tuple[str, int]) -> None:
    assert listen_address(text) == address


@pytest.mark.parametrize("parse,text", [
    (duration, "soon"), (duration, "-1s"), (duration, ""), (duration, "1d"),
    (size, "1Ti"), (size, "-5"), (size, "lots"),
    (listen_address, "nope"), (listen_address, ":99999"), (listen_address, "host:"),
])  # fmt: skip
def test_bad_values_say_what_was_expected(parse, text: str) -> None:
    with pytest.raises(FlagError, match=r"like|must be"):
        parse(text)
    parser = argparse.ArgumentParser()
    parser.add_argument("--x", type=parse)
    with pytest.raises(SystemExit):
        parser.parse_args(["--x", text])


async def test_a_bad_listen_address_is_a_flag_error_for_every_server(capsys) -> None:
    bad = "--web.listen-address=localhost:metrics"
    args = reporter_parser().parse_args(["--prometheus-url=http://127.0.0.1:1", "--output=-", bad])
    assert await reporter_run(args) == 2
    assert "listen address must be [host]:port" in capsys.readouterr().err
    assert exporter_main([bad]) == 2
    assert extender_main(["--listen=localhost:http"]) == 2
    assert rulegen_main(["controller", bad]) == 2
