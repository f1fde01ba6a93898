"""Property-based tests of every route against extender/openapi.yaml (schemathesis).

A real ``mco-extender`` process serves a report file; schemathesis generates requests from the
OpenAPI description, valid and invalid, and checks every answer: no 5xx, documented status
codes and content types, response bodies that match their schemas, valid requests accepted.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.generation.modes import GenerationMode

from reporter.schema import Violation
from scripts.procs import Managed, free_port
from tests.extender.conftest import cluster_report, entry, write_reports

OPENAPI = Path(__file__).resolve().parents[2] / "extender" / "openapi.yaml"

schema = schemathesis.openapi.from_path(OPENAPI)
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])


@pytest.fixture(scope="module")
def base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("schemathesis")
    report = workdir / "report.json"
    nodes = {
        "a": entry(0.1, kata=True),
        "b": entry(0.7, age=300),
        "c": entry(0.2, schedulable=False, violations=[Violation("psi_io_some", 0.4, 0.3)]),
    }
    write_reports(report, [cluster_report(nodes)])
    port = free_port()
    proc = Managed(
        [sys.executable, "-m", "extender", f"--web.listen-address=127.0.0.1:{port}",
         f"--report-file={report}", "--stale-after=1h", "--log.level=warn"],
        name="mco-extender", log_path=workdir / "extender.log",
    )  # fmt: skip
    with proc:
        proc.wait_http(f"http://127.0.0.1:{port}/readyz")
        yield f"http://127.0.0.1:{port}"
        assert proc.alive, proc.log_tail()
    assert "Traceback" not in proc.log_tail(500), proc.log_tail(500)


@pytest.mark.slow
@schema.parametrize()
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
def test_routes_follow_their_openapi_description(case, base_url):
    case.call_and_validate(base_url=base_url)
