"""The one settings convention (``mco.flags``, ``mco.settings``) across every console script:
the same value parsers, one settings object per binary, one error path (exit 2, one line),
the same web flags on every server, and the old spellings mapped and warned about."""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import trustme

from exporter.cli import main as exporter_main
from exporter.cli import parse_settings as exporter_settings
from extender.cli import main as extender_main
from extender.cli import parse_settings as extender_settings
from mco.flags import FlagError, duration, go_duration, listen_address, size
from mco.settings import LeaderSettings, start_logging
from mco.webconfig import TLSServerConfig
from reporter.cli import main as reporter_main
from reporter.cli import parse_settings as reporter_settings
from rulegen.cli import ControllerCommand
from rulegen.cli import main as rulegen_main
from rulegen.cli import parse_settings as rulegen_settings


@pytest.mark.parametrize(
    "text,seconds",
    [("250ms", 0.25), ("1s", 1.0), ("1.5s", 1.5), ("2m", 120.0), ("1h", 3600.0), ("7", 7.0),
     ("1.5", 1.5), (" 30s ", 30.0), ("1m30s", 90.0), ("1h2m3.5s", 3723.5), ("1s500ms", 1.5),
     ("0s", 0.0), ("7d", 604800.0), ("1w2d", 777600.0)],
)  # fmt: skip
def test_durations(text: str, seconds: float) -> None:
    assert duration(text) == seconds


@pytest.mark.parametrize(
    "text,go",
    [("250ms", "250ms"), ("1s", "1s"), ("1.5s", "1.5s"), ("90", "1m30s"), ("2m", "2m"),
     ("1h2m3.5s", "1h2m3.5s"), ("1s500ms", "1.5s"), ("0s", "0ms")],
)  # fmt: skip
def test_durations_go_back_in_go_spelling(text: str, go: str) -> None:
    """What a parsed flag writes into a scheduler's configuration reads back the same."""
    assert go_duration(duration(text)) == go
    assert duration(go) == duration(text)


def test_every_controller_defaults_its_lease_to_the_pods_namespace(monkeypatch) -> None:
    monkeypatch.setenv("POD_NAMESPACE", "mco-system")
    rulegen = rulegen_settings(["controller"])
    reporter = reporter_settings(["--prometheus-url", "http://p:9090"])
    assert isinstance(rulegen, ControllerCommand)
    for leader in (rulegen.leader, reporter.leader):
        assert leader.elector_kwargs()["namespace"] == "mco-system"
    named = LeaderSettings(lease_name="l", namespace="elsewhere")
    assert named.elector_kwargs()["namespace"] == "elsewhere"


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
    (duration, "soon"), (duration, "-1s"), (duration, ""), (duration, "1h1d"), (duration, "1s1m"),
    (duration, "1m1m"), (duration, "1m 30s"), (duration, "ms"), (duration, "1m30"),
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


Main = Callable[[list[str]], int]
_REPORTER = ["--prometheus-url=http://127.0.0.1:1", "--output=-"]
# Every console script (and subcommand), with the flags it needs to get as far as the bad one.
BINARIES: list[tuple[str, Main, list[str]]] = [
    ("mco-exporter", exporter_main, []),
    ("mco-extender", extender_main, []),
    ("mco-extender", extender_main, ["serve"]),
    ("mco-reporter", reporter_main, _REPORTER),
    ("mco-rulegen", rulegen_main, ["controller"]),
]


def exits_2_with_one_line(main: Main, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("\n"), err
    return err


@pytest.mark.parametrize("prog,main,base", BINARIES)
@pytest.mark.parametrize(
    "bad,reason",
    [("--web.listen-address=localhost:metrics", "listen address must be [host]:port"),
     ("--no-such-flag", "unrecognized arguments: --no-such-flag"),
     ("--log.level=loud", "argument --log.level: invalid choice: 'loud'")],
)  # fmt: skip
def test_a_bad_flag_exits_2_with_one_line_in_every_binary(prog, main, base, bad, reason, capsys):
    err = exits_2_with_one_line(main, [*base, bad], capsys)
    assert err.startswith(f"{prog}: error: {reason}"), err


@pytest.mark.parametrize(
    "flag,reason",
    [("--collector.diskstats.device-exclude=(", "missing ), unterminated subpattern"),
     ("--collector.perf_llc.events=bogus", "not an event set; choose one of generic"),
     ("--collector.biolatency.by-operation=yes", "'yes': not true or false")],
)  # fmt: skip
def test_a_bad_collector_option_stops_the_exporter_at_start(flag, reason, capsys) -> None:
    """Not a traceback, and not a collector quietly off on every node."""
    err = exits_2_with_one_line(exporter_main, [flag], capsys)
    assert err.startswith(f"mco-exporter: error: argument {flag.split('=')[0]}: "), err
    assert reason in err


@pytest.mark.parametrize(
    "prog,main,argv",
    [("mco-rulegen", rulegen_main, ["controller", "--kubeconfig"]),
     ("mco-reporter", reporter_main, ["--prometheus-url=http://127.0.0.1:1", "--kubeconfig"])],
)  # fmt: skip
def test_unusable_kubernetes_credentials_exit_2_with_one_line(prog, main, argv, tmp_path, capsys):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")  # no cluster, no context
    assert main([*argv, str(kubeconfig)]) == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"{prog}: error: no Kubernetes API configuration: "), last


@pytest.mark.parametrize(
    "prog,main,argv",
    [("mco-extender", extender_main, ["print-config"]),  # --volcano or --kube-scheduler
     ("mco-extender", extender_main, ["print-config", "--volcano", "--url=ftp://x"]),
     ("mco-rulegen", rulegen_main, ["render", "--label=novalue"]),
     ("mco-rulegen", rulegen_main, ["controller", "--resync=soon"]),
     ("mco-reporter", reporter_main, [*_REPORTER, "--interval=1h1d"]),
     ("mco-reporter", reporter_main, ["--output=-"])],  # --prometheus-url is required
)  # fmt: skip
def test_subcommands_and_values_fail_the_same_way(prog, main, argv, capsys):
    assert exits_2_with_one_line(main, argv, capsys).startswith(f"{prog}: error: ")


@pytest.mark.parametrize("prog,main,base", BINARIES)
@pytest.mark.parametrize(
    "content,reason",
    [("tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n  bogus: 1\n",
      "unknown key 'bogus' in tls_server_config"),
     ("basic_auth_users:\n  prom: not-a-hash\n", "basic_auth_users.prom is not a bcrypt hash"),
     ("tls_server_config:\n  cert_file: missing.crt\n  key_file: missing.key\n",
      "cannot load cert_file"),
     ("[unclosed", "not YAML")],
)  # fmt: skip
def test_a_bad_web_config_file_exits_2_with_one_line_in_every_server(
    prog, main, base, content, reason, tmp_path, capsys
):
    config = tmp_path / "web.yml"
    config.write_text(content)
    err = exits_2_with_one_line(main, [*base, f"--web.config.file={config}"], capsys)
    assert err.startswith(f"{prog}: error: {config}: "), err
    assert reason in err


@pytest.fixture
def pem(tmp_path: Path) -> dict[str, str]:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    files = {"cert": tmp_path / "tls.crt", "key": tmp_path / "tls.key", "ca": tmp_path / "ca.crt"}
    leaf.cert_chain_pems[0].write_to_path(str(files["cert"]))
    leaf.private_key_pem.write_to_path(str(files["key"]))
    ca.cert_pem.write_to_path(str(files["ca"]))
    return {k: str(v) for k, v in files.items()}


def test_the_extenders_old_flags_map_onto_the_web_settings(pem, capsys) -> None:
    s = extender_settings(
        ["--listen=127.0.0.1:9999", f"--tls-cert={pem['cert']}", f"--tls-key={pem['key']}",
         f"--client-ca={pem['ca']}"]
    )  # fmt: skip
    assert (s.web.host, s.web.port) == ("127.0.0.1", 9999)
    assert s.web.config.tls == TLSServerConfig(
        pem["cert"], pem["key"], pem["ca"], "RequireAndVerifyClientCert"
    )
    assert s.web.config.ssl_context is not None
    assert len(s.deprecated) == 4
    start_logging(s.log, s.deprecated)
    err = capsys.readouterr().err
    for old, new in (
        ("--listen", "--web.listen-address"),
        ("--tls-cert", "--web.config.file"),
        ("--tls-key", "--web.config.file"),
        ("--client-ca", "--web.config.file"),
    ):
        assert err.count(f"{old} is deprecated and will be removed; use {new}") == 1, err
    # The long spellings of the same flags too.
    long = extender_settings([f"--tls-cert-file={pem['cert']}", f"--tls-key-file={pem['key']}"])
    assert long.web.config.tls == TLSServerConfig(pem["cert"], pem["key"])
    assert (long.web.host, long.web.port) == ("", 9848)  # every interface, both families


def test_the_web_tls_flags_map_onto_the_web_settings_everywhere(pem) -> None:
    old = [f"--web.tls-cert-file={pem['cert']}", f"--web.tls-key-file={pem['key']}"]
    expected = TLSServerConfig(pem["cert"], pem["key"])
    controller = rulegen_settings(["controller", *old])
    assert isinstance(controller, ControllerCommand)
    reporter = reporter_settings([*_REPORTER, *old])
    assert reporter.web is not None
    for s in (exporter_settings(old), reporter, controller):
        assert s.web is not None and s.web.config.tls == expected
        assert len(s.deprecated) == 2
    with_ca = exporter_settings([*old, f"--web.tls-client-ca-file={pem['ca']}"])
    assert with_ca.web.config.tls is not None
    assert with_ca.web.config.tls.client_auth_type == "RequireAndVerifyClientCert"


def test_old_tls_flags_and_a_web_config_file_do_not_mix(pem, tmp_path, capsys) -> None:
    config = tmp_path / "web.yml"
    config.write_text("{}\n")
    err = exits_2_with_one_line(
        exporter_main, [f"--web.config.file={config}", f"--web.tls-cert-file={pem['cert']}"],
        capsys,
    )  # fmt: skip
    assert "cannot be combined" in err


def test_default_listen_addresses_are_every_interface_of_both_families() -> None:
    controller = rulegen_settings(["controller"])
    assert isinstance(controller, ControllerCommand)
    reporter = reporter_settings(_REPORTER)
    assert reporter.web is not None
    for web, port in ((exporter_settings([]).web, 9847), (extender_settings([]).web, 9848),
                      (reporter.web, 9849), (controller.web, 9850)):  # fmt: skip
        assert (web.host, web.port, web.bind_host) == ("", port, None)
    assert reporter_settings([*_REPORTER, "--web.listen-address="]).web is None


# Flags of the developer tools (scripts/, bench/) that take a length of time, by their name.
TIME_FLAG = re.compile(r"^--.*(duration|seconds|timeout|interval|period|delay|wait|idle)")
TOOLS = Path(__file__).resolve().parent.parent


def _time_flags() -> list[tuple[str, str, str | None]]:
    """(file, flag, the name of its ``type=``) for every time flag of scripts/ and bench/."""
    found = []
    for path in sorted([*TOOLS.glob("scripts/*.py"), *TOOLS.glob("bench/*.py")]):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"
            ):
                continue
            flags = [a.value for a in node.args if isinstance(a, ast.Constant)]
            if not any(isinstance(f, str) and TIME_FLAG.match(f) for f in flags):
                continue
            kind = next((k.value for k in node.keywords if k.arg == "type"), None)
            name = kind.id if isinstance(kind, ast.Name) else None
            found.append((path.name, str(flags[0]), name))
    return found


def test_every_time_flag_of_the_tools_uses_the_duration_parser() -> None:
    flags = _time_flags()
    assert {f for _, f, _ in flags} >= {"--duration", "--idle-seconds", "--seconds"}
    assert [f for f in flags if f[2] != "duration"] == []


@pytest.mark.parametrize("module", ["scripts.local_stack", "bench.rules", "bench.detection"])
def test_a_tool_refuses_a_bad_duration_before_starting_anything(
    module: str, capsys: pytest.CaptureFixture[str]
) -> None:
    flag = {"scripts.local_stack": "--duration", "bench.rules": "--seconds"}.get(
        module, "--idle-seconds"
    )
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(module).main([flag, "forever"])
    assert exit_info.value.code == 2
    assert "not a duration like 500ms" in capsys.readouterr().err


ROOT = Path(__file__).resolve().parents[1]
_PROM = "--prometheus-url=http://127.0.0.1:1"
# Per console script: a command line naming a file the binary reads as its configuration;
# FILE becomes the bad file. (In-process tests above cover the other files and subcommands:
# these start processes, to see every line a user sees, library warnings included.)
BAD_FILES: dict[str, list[list[str]]] = {
    "mco-exporter": [["--web.config.file=FILE"]],
    "mco-rulegen": [["rollback", "--kubeconfig=FILE"]],
    "mco-reporter": [[_PROM, "--kubeconfig=FILE"]],
    "mco-extender": [["--kubeconfig=FILE"]],
    "kubectl-mco": [["nodes", "--kubeconfig=FILE"]],
}
# Per console script: the commands a bad flag follows (each subcommand parses its own).
BAD_FLAG_AFTER: dict[str, list[list[str]]] = {
    "mco-exporter": [[]],
    "mco-rulegen": [["rollback"]],
    "mco-reporter": [[_PROM]],
    "mco-extender": [["print-config", "--volcano"]],
    "kubectl-mco": [["why", "web-1"]],
}


def console_scripts() -> dict[str, str]:
    """pyproject's [project.scripts]: name -> ``module:function``."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    scripts: dict[str, str] = pyproject["project"]["scripts"]
    return scripts


def run_script(name: str, argv: list[str], home: Path) -> subprocess.CompletedProcess[str]:
    """The console script as its entry point runs it, in a fresh process: all a user sees on
    stderr, library warnings included. No kubeconfig, no in-cluster service account."""
    module, function = console_scripts()[name].split(":")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KUBE", "KUBERNETES_"))}
    env.update(HOME=str(home), PYTHONPATH=str(ROOT))
    code = f"import sys; from {module} import {function}; sys.exit({function}())"
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def not_one_line_exit_2(cases: list[tuple[str, list[str]]], home: Path, needle: str) -> list[str]:
    """Each (script, argv) run at once (each is a process start); what did not exit 2 with
    exactly one line, ``NAME: error: ...`` naming ``needle``."""
    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        results = list(pool.map(lambda case: run_script(case[0], case[1], home), cases))
    wrong = []
    for (name, argv), result in zip(cases, results, strict=True):
        lines = result.stderr.splitlines()
        if not (
            result.returncode == 2
            and len(lines) == 1
            and lines[0].startswith(f"{name}: error: ")
            and needle in lines[0]
        ):
            wrong.append(f"{name} {' '.join(argv)}: exit {result.returncode}, {result.stderr!r}")
    return wrong


def test_the_tables_cover_every_console_script() -> None:
    assert set(BAD_FILES) == set(console_scripts()) == set(BAD_FLAG_AFTER)


def test_every_console_script_refuses_a_bad_flag_with_exit_2_and_one_line(tmp_path: Path) -> None:
    cases = [(n, [*a, "--no-such-flag"]) for n, each in BAD_FLAG_AFTER.items() for a in each]
    assert not_one_line_exit_2(cases, tmp_path, "--no-such-flag") == []


@pytest.mark.parametrize("content", [None, "[unclosed"], ids=["missing", "not-yaml"])
def test_every_console_script_refuses_a_bad_file_with_exit_2_and_one_line(
    content: str | None, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    if content is not None:
        bad.write_text(content)
    cases = [
        (n, [a.replace("FILE", str(bad)) for a in argv])
        for n, each in BAD_FILES.items()
        for argv in each
    ]
    assert not_one_line_exit_2(cases, tmp_path, str(bad)) == []
