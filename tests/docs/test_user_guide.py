"""Every example in docs/user-guide.md is accounted for.

`sh test` blocks run against a live local stack, and the `promql test` block is evaluated by its
Prometheus. The guide spells MCO's default local ports and paths; the test runs the stack on free
ports and a temporary directory and rewrites those in the commands, nothing else. Each block runs
as a new user's fresh shell would: a clean environment (the system's default PATH, no virtualenv),
in the repository root, then the guide's one `sh setup` block, then the block in a work directory.

Plain `sh` blocks are what a test here cannot run inline (`make run` is interactive and long):
each of their lines must be named in COVERED, with the end-to-end test that runs it, and that
test must exist and contain what proves it. `sh cluster` blocks need a Kubernetes API server:
their `helm install` commands are rendered offline with the chart and must install what their
scenario promises. No other kind of block may appear.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from rulegen.series import INTERFERENCE_LEVEL
from scripts.local_stack import LocalStack, Ports, StackSettings
from tests.chart.helm import CHART, SCENARIOS, merge, render, scenario_values
from tests.chart.test_scenarios import EXPECTED

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "user-guide.md"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
KINDS = {"sh test", "promql test", "sh", "sh cluster", "sh setup"}
# A fresh login shell on Debian (/etc/profile): no virtualenv, nothing the test process has.
FRESH_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
COMMANDS = ("mco-exporter", "mco-rulegen", "mco-reporter", "mco-extender")

# Each line of a plain `sh` block -> (the test that runs it, text that test must contain).
COVERED: dict[str, tuple[str, str]] = {
    "make run": (
        "tests/e2e/test_make_run.py::test_make_run_live_view_then_ctrl_c_stops_everything",
        '"make", "--no-print-directory", "run"',
    ),
    "make run STRESS=io": (
        "tests/e2e/test_make_run.py::test_make_run_live_view_then_ctrl_c_stops_everything",
        '"STRESS=io"',
    ),
    # Not through make: the same `--stress` pod loads (LocalStack.start_load, via
    # stack_with_pods in the test).
    "make run STRESS=memory": (
        "tests/e2e/test_detection.py::"
        "test_a_pod_thrashing_in_its_own_limit_neither_marks_nor_filters_the_node",
        'stack_with_pods(stack_factory, "memory")',
    ),
    "make run STRESS=cross-pod": (
        "tests/e2e/test_detection.py::"
        "test_a_pod_starved_by_another_marks_the_node_and_the_report_names_both",
        'stack_with_pods(stack_factory, "cross-pod")',
    ),
    "make run STRESS=io-limited": (
        "tests/e2e/test_detection.py::"
        "test_a_pod_at_its_own_io_limit_neither_marks_nor_filters_the_node",
        'stack_with_pods(stack_factory, "io-limited")',
    ),
    "make run STRESS=io-cross-pod": (
        "tests/e2e/test_detection.py::"
        "test_a_pod_whose_reads_queue_behind_another_pods_writes_marks_the_node",
        'stack_with_pods(stack_factory, "io-cross-pod")',
    ),
}


def fenced(kind: str) -> list[str]:
    return [body for info, body in FENCE.findall(GUIDE.read_text()) if info.strip() == kind]


def blocks() -> list[str]:
    found = fenced("sh test")
    assert len(found) >= 7, "the guide lost its runnable examples"
    return found


def fresh_env() -> dict[str, str]:
    env = {"PATH": FRESH_PATH, "HOME": os.environ.get("HOME", "/root"), "LANG": "C.UTF-8"}
    if "TMPDIR" in os.environ:
        env["TMPDIR"] = os.environ["TMPDIR"]
    return env


def in_fresh_shell(block: str, work: Path) -> str:
    """The script a new user runs: the guide's setup in the repository root, then ``block``."""
    (setup,) = fenced("sh setup")
    return f"cd {shlex.quote(str(ROOT))}\n{setup}\ncd {shlex.quote(str(work))}\n{block}"


@pytest.mark.slow
def test_the_setup_puts_every_command_the_guide_runs_on_path(tmp_path: Path) -> None:
    used = {word for block in blocks() for word in COMMANDS if word in block}
    assert used >= {"mco-extender", "mco-rulegen", "mco-reporter"}
    lookup = "command -v " + " ".join(COMMANDS)

    def run(script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            env=fresh_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    bare = run(lookup)
    assert bare.returncode != 0 and not bare.stdout.strip(), "the clean shell is not clean"
    found = run(in_fresh_shell(lookup, tmp_path))
    assert found.returncode == 0, found.stderr
    paths = [Path(line) for line in found.stdout.split()]
    assert [p.name for p in paths] == list(COMMANDS)
    assert all(p.parent == ROOT / ".venv" / "bin" for p in paths), paths
    for command in COMMANDS:
        assert run(in_fresh_shell(f"{command} --help", tmp_path)).returncode == 0, command


def commands(block: str) -> list[str]:
    """Shell commands of a block: continuation lines joined, comments and blanks dropped."""
    joined = block.replace("\\\n", " ")
    return [
        line.split("#", 1)[0].strip()
        for line in joined.splitlines()
        if line.split("#", 1)[0].strip()
    ]


def test_every_block_is_of_a_known_kind() -> None:
    kinds = [info.strip() for info, _ in FENCE.findall(GUIDE.read_text())]
    assert set(kinds) <= KINDS, set(kinds) - KINDS
    assert kinds.count("promql test") >= 1


def test_plain_sh_lines_are_each_covered_by_a_named_e2e_test() -> None:
    lines = [line for block in fenced("sh") for line in commands(block)]
    assert lines, "the make run block is gone"
    uncovered, stale = set(lines) - set(COVERED), set(COVERED) - set(lines)
    assert not uncovered and not stale, f"uncovered: {sorted(uncovered)}, stale: {sorted(stale)}"
    for line, (node_id, evidence) in COVERED.items():
        path, name = node_id.split("::")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        test = getattr(module, name, None)
        assert callable(test), f"{line!r}: {node_id} does not exist"
        assert evidence in inspect.getsource(test), f"{node_id} does not run {line!r}"


def helm_installs() -> list[list[str]]:
    return [
        shlex.split(command)
        for block in fenced("sh cluster")
        for command in commands(block)
        if command.startswith("helm install ")
    ]


def test_an_install_command_for_every_scenario_renders_what_it_promises() -> None:
    seen = set()
    for argv in helm_installs():
        release, chart = argv[2], argv[3]
        assert (ROOT / chart).resolve() == CHART, argv
        values: dict[str, Any] = {}
        scenario = None
        namespace = "default"
        rest = argv[4:]
        while rest:
            flag = rest.pop(0)
            if flag in ("-n", "--namespace"):
                namespace = rest.pop(0)
            elif flag == "-f":
                path = ROOT / rest.pop(0)
                assert path.is_file(), path
                scenario = path.stem
                values = merge(values, scenario_values(scenario))
            elif flag == "--set":
                key, value = rest.pop(0).split("=", 1)
                override: dict[str, Any] = {}
                node = override
                *parents, leaf = key.split(".")
                for part in parents:
                    node = node.setdefault(part, {})
                node[leaf] = yaml.safe_load(value)
                values = merge(values, override)
            else:
                assert flag == "--create-namespace", f"unknown flag {flag} in {argv}"
        assert scenario in SCENARIOS, argv
        # EXPECTED spells object names for the release "mco"; other names change only names.
        as_mco = render(values, release="mco", namespace=namespace).objects
        objects = {f"{o['kind']}/{o['metadata']['name']}" for o in as_mco}
        present, absent = EXPECTED[scenario]
        assert present <= objects, f"{argv}: missing {sorted(present - objects)}"
        assert not (absent & objects), f"{argv}: unexpected {sorted(absent & objects)}"
        as_named = render(values, release=release, namespace=namespace).objects
        assert sorted(o["kind"] for o in as_named) == sorted(o["kind"] for o in as_mco), argv
        seen.add(scenario)
    assert seen == set(SCENARIOS), f"no install command for {sorted(set(SCENARIOS) - seen)}"


@pytest.mark.slow
@pytest.mark.e2e
def test_guide_blocks_run_against_the_local_stack(tmp_path: Path) -> None:
    stack = LocalStack(StackSettings(workdir=tmp_path / "stack", ports=Ports(0, 0, 0, 0)))
    with stack:
        substitutions = {
            "127.0.0.1:9847": f"127.0.0.1:{stack.ports.exporter}",
            "127.0.0.1:9848": f"127.0.0.1:{stack.ports.extender}",
            "127.0.0.1:9849": f"127.0.0.1:{stack.ports.reporter}",
            "127.0.0.1:19090": f"127.0.0.1:{stack.ports.prometheus}",
            ".cache/local-stack/": f"{stack.workdir}/",
        }
        env = fresh_env()
        work = tmp_path / "work"
        work.mkdir()
        outputs: list[str] = []
        for block in blocks():
            script = block
            for default, actual in substitutions.items():
                script = script.replace(default, actual)
            result = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", in_fresh_shell(script, work)],
                cwd=work,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert result.returncode == 0, (
                f"{block}\n--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
            )
            assert result.stdout.strip(), f"no output from:\n{block}"
            outputs.append(result.stdout)
        rejected = outputs[-2]
        assert "spec.window" in rejected and "psiIOSome" in rejected

        (promql,) = fenced("promql test")
        for line in promql.strip().splitlines():
            response = requests.get(
                f"{stack.prometheus.url}/api/v1/query", params={"query": line}, timeout=10
            )
            body = response.json()
            assert body["status"] == "success", (line, body)
            if line.split("#", 1)[0].strip() == INTERFERENCE_LEVEL:  # "one series per node"
                nodes = [r["metric"].get("node") for r in body["data"]["result"]]
                assert nodes == [stack.settings.node], (line, nodes)
