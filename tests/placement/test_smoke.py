"""A few nodes through the whole placement benchmark: real Prometheus, reporter, extender."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from bench.placement import run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="needs prometheus"),
]


def test_smoke_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "results.json"
    flags = ["--nodes", "3", "--duration", "40", "--burst-every", "15", "--seed", "5", "--quick"]
    code = run.main([*flags, "--workdir", str(tmp_path / "work"), "--json", str(out)])
    lines = capsys.readouterr().out.strip().splitlines()
    last = re.fullmatch(
        r"placement: exposure mco/default = ([0-9.]+|inf), herding max/even = ([0-9.]+)",
        lines[-1],
    )
    assert last, lines[-1]
    ratio, herding = float(last[1]), float(last[2])
    assert code == (0 if ratio <= 0.5 and herding <= 2 else 1)
    rows = {r["run"]: r for r in json.loads(out.read_text())}
    assert set(rows) == {
        "default/none",
        "mco-basic/kube",
        "mco-basic/volcano",
        "mco-full/kube",
        "mco-full/volcano",
    }
    for r in rows.values():
        assert r["placed"] > 0
        assert r["online_pod_seconds"] > 0
        assert 0 <= r["exposure"] <= 1
        assert r["p99_inflation"] >= 1
    # Every MCO run asked the real extender (which took CPU for it); the default did not.
    assert rows["default/none"]["extender_cpu_ms"] is None
    assert all(rows[k]["extender_cpu_ms"] > 0 for k in rows if k.startswith("mco-"))
    # The pipeline saw the nodes: the reporter wrote a report the extender served.
    assert (tmp_path / "work" / "basic" / "report.json").exists()
