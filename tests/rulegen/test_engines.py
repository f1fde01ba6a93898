"""The generated rules in real PromQL engines, checked against the model in plain Python.

- A real Prometheus scrapes the real mco-exporter (under real I/O load) and evaluates the rules;
  the values it recorded at an evaluation time agree with testkit/rule_reference.py computed
  from the raw samples Prometheus held for that window: block latency from diskstats, and
  (where eBPF loads) from the real biolatency histogram under direct writes.
- A synthetic fleet (testkit/fleet.py, one node per profile, every branch of the model),
  a static target and a target that is down are scraped by Prometheus and by VictoriaMetrics;
  vmalert evaluates the same rule file, both groups, against VictoriaMetrics. Both engines'
  recorded series equal the model's, series for series, and both fire the alerts the model
  and the inputs imply, label set for label set.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from rulegen import series as S
from rulegen.catalog import CATALOG
from rulegen.generate import VM_RULES_PATH
from rulegen.latency import buckets_flag
from rulegen.model import SIGNALS, DetectionRuleConfig, load_config
from rulegen.render import render_rules
from scripts.procs import (
    Managed,
    Prometheus,
    ScrapeTarget,
    VictoriaMetrics,
    VMAlert,
    free_port,
    running,
    wait_until,
)
from testkit import fleet as F
from testkit.rule_reference import (
    RECORDED_NAMES,
    Obs,
    evaluate,
    extrapolated_rate,
    held,
    recorded,
    signal_excess,
)

ROOT = Path(__file__).resolve().parents[2]
ENGINE_CONFIG = Path(__file__).with_name("promtool") / "config.yaml"
pytestmark = [pytest.mark.slow, pytest.mark.host_load]

Key = tuple[str, str, tuple[tuple[str, str], ...]]  # node, name, extra labels
RECORDED_SELECTOR = '{__name__=~"' + "|".join(n.replace(":", ":") for n in RECORDED_NAMES) + '"}'


def engine_values(result: list[dict[str, Any]]) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for r in result:
        labels = dict(r["metric"])
        name, node = labels.pop("__name__"), labels.pop("node")
        out[(node, name, tuple(sorted(labels.items())))] = float(r["value"][1])
    return out


def expected_values(
    config: DetectionRuleConfig, per_node: dict[str, list[Obs]]
) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for node, obs in per_node.items():
        for (name, labels), value in recorded(evaluate(config, obs)).items():
            out[(node, name, tuple(sorted(labels)))] = value
    return out


def differences(got: dict[Key, float], want: dict[Key, float], rel: float) -> list[str]:
    problems = [f"missing {k} (want {want[k]!r})" for k in sorted(want.keys() - got.keys())]
    problems += [f"unexpected {k} = {got[k]!r}" for k in sorted(got.keys() - want.keys())]
    for k in sorted(want.keys() & got.keys()):
        if not math.isclose(got[k], want[k], rel_tol=rel, abs_tol=1e-12):
            problems.append(f"{k}: got {got[k]!r}, want {want[k]!r}")
    return problems


# --------------------------------------------------------------------------------------------
# Real exporter, real Prometheus


def raw_observations(prom: Prometheus, at: float, window: int) -> list[Obs]:
    """Every raw mco_ series Prometheus held in the window ending at ``at``, reduced like PromQL."""
    matrix = prom.query(f'{{__name__=~"mco_.*",node="local"}}[{window}s]', at=at)
    instant = {
        tuple(sorted(r["metric"].items())): float(r["value"][1])
        for r in prom.query('{__name__=~"mco_.*",node="local"}', at=at)
    }
    obs = []
    for r in matrix:
        labels = dict(r["metric"])
        name = labels.pop("__name__")
        points = [(float(t), float(v)) for t, v in r["values"]]
        counter = name.endswith(("_total", "_bucket", "_count", "_sum"))
        obs.append(
            Obs(
                name,
                labels,
                rate=extrapolated_rate(points, at - window, at, window) if counter else None,
                avg=None if counter else math.fsum(v for _, v in points) / len(points),
                last=instant.get(tuple(sorted(r["metric"].items()))),
            )
        )
    return obs


def recorded_at(prom: Prometheus, at: float) -> dict[Key, float]:
    """The samples the rule group recorded at exactly ``at``."""
    out: dict[Key, float] = {}
    for r in prom.query(RECORDED_SELECTOR[:-1] + ',node="local"}[500ms]', at=at):
        labels = dict(r["metric"])
        name, node = labels.pop("__name__"), labels.pop("node")
        for t, v in r["values"]:
            if abs(float(t) - at) < 1e-6:
                out[(node, name, tuple(sorted(labels.items())))] = float(v)
    return out


EXPLAINED = {S.SIGNAL_INDEX, *(CATALOG.by_key(k).series for k in CATALOG.explanatory)}


def context_differences(prom: Prometheus, config: DetectionRuleConfig) -> list[list[str]]:
    """The explanation group's context series at each of its (up to 3) newest evaluations
    against the model on the raw samples then: one list of differences per evaluation (one
    that a scrape in flight raced differs)."""
    names = EXPLAINED - {S.SIGNAL_INDEX}
    selector = f'{{__name__=~"{"|".join(names)}",node="local"}}[{4 * config.window}s]'
    times = sorted({float(t) for r in prom.query(selector) for t, _ in r["values"]})
    out = []
    for at in times[-3:]:
        got = {k: v for k, v in recorded_at(prom, at).items() if k[1] in names}
        want = expected_values(config, {"local": raw_observations(prom, at, config.window)})
        out.append(differences(got, {k: v for k, v in want.items() if k[1] in names}, rel=1e-6))
    return out


def explained_agree(prom: Prometheus, config: DetectionRuleConfig) -> set[Key]:
    """The explanation group's newest signal indices, each checked against the model applied to
    the signal it read at that evaluation (the newest recorded within two intervals): the
    keys of those that agree (within 1e-9)."""
    agree: set[Key] = set()
    by_label = {spec.label: spec for spec in SIGNALS}
    window = f"{2 * config.evaluation_interval}s"
    for r in prom.query(f'{S.SIGNAL_INDEX}{{node="local"}}[{4 * config.window}s]'):
        labels = dict(r["metric"])
        t, v = r["values"][-1]
        spec = by_label[labels["signal"]]
        (read,) = prom.query(
            f'last_over_time({spec.series}{{node="local"}}[{window}])', at=float(t)
        )
        excess = signal_excess(config, spec, float(read["value"][1]))
        if math.isclose(float(v), min(max(excess, 0.0), 1.0), rel_tol=1e-9, abs_tol=1e-12):
            del labels["__name__"], labels["node"]
            agree.add(("local", S.SIGNAL_INDEX, tuple(sorted(labels.items()))))
    return agree


def violated_replayed(prom: Prometheus, at: float, config: DetectionRuleConfig) -> dict[Key, float]:
    """Violated at ``at`` per the model (reference ``held``), replayed from every exceeded
    sample the rules recorded since Prometheus started: the held series depends on the
    history, not on one window."""
    hold, clear = config.hysteresis.ranges(config.evaluation_interval)
    out: dict[Key, float] = {}
    for r in prom.query(f'{S.HARD_CONSTRAINT_EXCEEDED}{{node="local"}}[10m]', at=at):
        labels = dict(r["metric"])
        labels.pop("__name__")
        node = labels.pop("node")
        # Integer milliseconds: the range edges t - d compare exactly.
        samples = [(round(float(t) * 1000), float(v)) for t, v in r["values"]]
        replay = held(samples, hold * 1000, clear * 1000)
        if replay and replay[-1][0] == round(at * 1000):
            out[(node, S.HARD_CONSTRAINT_VIOLATED, tuple(sorted(labels.items())))] = replay[-1][1]
    return out


def biolatency_off_reason(log_path: Path) -> str:
    """Why the exporter turned its biolatency collector off, from its JSON log."""
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("collector") == "biolatency" and "reason" in record:
            return str(record["reason"])
    return "biolatency collector off (no reason logged)"


def direct_writes(path: Path) -> Managed:
    """4 MiB of O_DIRECT writes, over and over: block requests the page cache cannot absorb."""
    loop = f"while :; do dd if=/dev/zero of={path} bs=64k count=64 oflag=direct status=none; done"
    return Managed(["sh", "-c", loop], name="dd", log_path=path.with_suffix(".log"))


@pytest.mark.parametrize("biolatency", [False, True], ids=["diskstats", "ebpf"])
def test_prometheus_on_the_real_exporter_agrees_with_the_model(tmp_path, biolatency):
    """Without the eBPF histogram P95/P99 are the diskstats mean; with it, interpolated from
    the real histogram (the ebpf case needs root, bcc and kernel headers, else it skips)."""
    if biolatency and os.geteuid() != 0:
        pytest.skip("biolatency loads a BPF program: needs root (CAP_BPF, CAP_PERFMON)")
    config = DetectionRuleConfig.default()
    rules = tmp_path / "rules.yaml"
    rules.write_text(render_rules(config, generation=5))
    port = free_port()
    env = {}
    headers = ROOT / ".cache" / "kernel-headers"
    if biolatency and "BCC_KERNEL_SOURCE" not in os.environ and headers.is_dir():
        env["BCC_KERNEL_SOURCE"] = str(headers)  # what the Makefile exports
    exporter = Managed(
        [
            sys.executable,
            "-m",
            "exporter",
            f"--web.listen-address=127.0.0.1:{port}",
            "--collector.biolatency" if biolatency else "--no-collector.biolatency",
            "--node-name=local",
            "--log.format=json",
        ],
        name="mco-exporter",
        log_path=tmp_path / "exporter.log",
        env=env,
        cwd=ROOT,
    )
    prom = Prometheus(
        tmp_path / "prom",
        targets=[ScrapeTarget("mco-exporter", f"127.0.0.1:{port}", {"node": "local"})],
        rule_files=[rules],
    )
    # Real I/O load, so the I/O signals are not all zero.
    load = Managed(
        [
            "stress-ng",
            "--hdd",
            "1",
            "--hdd-bytes",
            "16M",
            "--timeout",
            "90s",
            "--temp-path",
            str(tmp_path),
        ],
        name="stress-ng",
        log_path=tmp_path / "stress.log",
    )
    # Direct writes keep requests completing through the whole window, so the histogram's
    # quantiles are interpolated from many requests, not from none.
    writes = direct_writes(tmp_path / "direct.bin")
    with running(exporter):
        exporter.wait_http(f"http://127.0.0.1:{port}/metrics", timeout=90)  # BPF compile
        if biolatency:
            metrics = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            if 'mco_exporter_collector_success{collector="biolatency"} 1.0' not in metrics:
                pytest.skip(
                    f"biolatency is off on this host: {biolatency_off_reason(exporter.log_path)}"
                )
        with running(prom, load, *([writes] if biolatency else [])):
            prom.wait_for_series(S.INTERFERENCE_LEVEL, timeout=60)
            time.sleep(config.window + 2)  # a full window of samples behind the next evaluation
            info = prom.query(S.RULE_CONFIG_INFO)
            assert [r["metric"] for r in info] == [
                {"__name__": S.RULE_CONFIG_INFO, "generation": "5", "hash": config.config_hash()}
            ]
            latest = max(
                float(t) for r in prom.query(f"{S.INTERFERENCE_LEVEL}[3s]") for t, _ in r["values"]
            )
            attempts = []
            # A scrape still in flight when the group ran at T is in storage now but was not
            # seen by the rules; such a T is skipped (each attempt is a full comparison).
            for at in (
                latest,
                latest - 2 * config.evaluation_interval,
                latest - 4 * config.evaluation_interval,
            ):
                got = recorded_at(prom, at)
                raw = raw_observations(prom, at, config.window)
                want = expected_values(config, {"local": raw})
                want.update(violated_replayed(prom, at, config))
                # The explanation group records on its own clock (checked below).
                explained = {k for k in want if k[1] in EXPLAINED}
                got = {k: v for k, v in got.items() if k[1] not in EXPLAINED}
                want = {k: v for k, v in want.items() if k not in explained}
                # 1e-6: on a real, busy host the recorded values have been seen to differ
                # from the model uniformly by ~1e-8 (every rate() series alike: the evaluation
                # instant, not the formulas); any wrong formula or window is off by far more.
                problems = differences(got, want, rel=1e-6)
                if not problems:
                    break
                attempts.append(problems)
            else:
                pytest.fail(
                    "no evaluation agreed with the model:\n" + "\n".join(map(str, attempts))
                )
            assert explained_agree(prom, config) == {k for k in explained if k[1] == S.SIGNAL_INDEX}
            context_problems = context_differences(prom, config)
            assert [] in context_problems, context_problems
    # This host: PSI, diskstats, vmstat by type, steal; no PMU, resctrl, schedstat.
    assert got[("local", S.MEMORY_PRESSURE_FALLBACK, ())] == 0
    assert ("local", S.SIGNAL_SERIES["psiIOSome"], ()) in got
    assert ("local", S.SIGNAL_SERIES["llcMissRatio"], ()) not in got
    assert ("local", S.INTERFERENCE_LEVEL, ()) in got
    p95 = got[("local", S.SIGNAL_SERIES["blockIOLatencyP95Seconds"], ())]
    p99 = got[("local", S.SIGNAL_SERIES["blockIOLatencyP99Seconds"], ())]
    counts = [o for o in raw if o.name == "mco_block_io_latency_seconds_count"]
    if biolatency:
        # The quantiles came from the histogram (not the diskstats stand-in), with requests in
        # it: interpolated within a bucket of the exporter's 2^k us bounds, P99 at or above P95.
        assert counts and max(o.rate or 0.0 for o in counts) > 0, counts
        assert 0 < p95 <= p99 < math.inf, (p95, p99)
        # The exporter's default shape: one histogram per device, the operations summed.
        assert all("device" in o.labels and "operation" not in o.labels for o in counts)
    else:
        assert not counts
        assert p95 == p99  # the diskstats mean stands in for both


# --------------------------------------------------------------------------------------------
# Synthetic fleet, Prometheus and VictoriaMetrics + vmalert


@pytest.fixture(scope="module")
def fleet_target(tmp_path_factory) -> Iterator[ScrapeTarget]:
    workdir = tmp_path_factory.mktemp("fleet")
    port = free_port()
    server = Managed(
        [
            sys.executable,
            "-m",
            "testkit.fleet",
            f"--port={port}",
            f"--nodes={len(F.PROFILES)}",
            # The latency buckets an exporter deployed for this config exports.
            f"--latency-buckets={buckets_flag(load_config(ENGINE_CONFIG))}",
        ],
        name="fleet",
        log_path=workdir / "fleet.log",
        cwd=ROOT,
    )
    with running(server):
        server.wait_http(f"http://127.0.0.1:{port}/metrics")
        yield ScrapeTarget("mco-fleet", f"127.0.0.1:{port}")


def fleet_expected(config: DetectionRuleConfig, buckets: str | None = None) -> dict[Key, float]:
    """The model's values for the fleet: rates are the slopes, gauges their constant values.

    The latency buckets are those the fleet serves for ``config`` (``buckets``: others)."""
    kept = F.kept_bounds(buckets_flag(config) if buckets is None else buckets)
    per_node = {}
    for node, profile in F.assign(F.node_names(len(F.PROFILES)), list(F.PROFILES)).items():
        obs = [Obs("mco_node_info", {"nodename": node}, avg=1.0, last=1.0)]
        for s in F.served(profile):
            if s.name == "mco_block_io_latency_seconds_bucket" and dict(s.labels)["le"] not in kept:
                continue
            counter = s.name.endswith(("_total", "_bucket", "_count", "_sum"))
            obs.append(
                Obs(
                    s.name,
                    dict(s.labels),
                    rate=s.slope if counter else None,
                    avg=None if counter else s.base,
                    last=s.base,
                )
            )
        per_node[node] = obs
    return expected_values(config, per_node)


def test_the_fleets_buckets_give_the_verdicts_of_all_buckets():
    """What the engines are checked on has the verdicts every bucket would give."""
    config = load_config(ENGINE_CONFIG)
    served, every = fleet_expected(config), fleet_expected(config, "all")
    verdicts = (
        S.SIGNAL_INDEX,
        S.DETECTION_INDEX,
        S.DETECTION_TRIGGERED,
        S.INTERFERENCE_LEVEL,
        S.SCHEDULE_SCORE,
        S.HARD_CONSTRAINT_VIOLATED,
    )
    assert {k: v for k, v in served.items() if k[1] in verdicts} == {
        k: v for k, v in every.items() if k[1] in verdicts
    }
    # Fewer buckets were served, and they moved a quantile outside the brackets.
    nodes = F.assign(F.node_names(len(F.PROFILES)), list(F.PROFILES))
    fewer = F.Fleet(nodes, 0, buckets_flag(config)).series_count
    assert fewer < F.Fleet(nodes, 0, "all").series_count
    assert any(served.get(k) != v for k, v in every.items() if "latency_p9" in k[1])


def test_vmalert_check_accepts_the_rule_file():
    result = VMAlert.check([ROOT / VM_RULES_PATH])
    assert result.returncode == 0, result.stdout + result.stderr


def shortened_alerts(rule_text: str, hold: str) -> str:
    """The rule file with the alerts group evaluated every second and every ``for:`` = ``hold``.

    Only the timing changes (the template fixes most ``for:`` durations at minutes); the
    expressions, labels and annotations both engines evaluate are the rendered ones.
    """
    doc = yaml.safe_load(rule_text)
    (alerts,) = [g for g in doc["groups"] if g["name"] == "mco.alerts"]
    alerts["interval"] = "1s"
    for rule in alerts["rules"]:
        assert "for" in rule, rule["alert"]
        rule["for"] = hold
    return yaml.safe_dump(doc, sort_keys=False)


# The raw series of a second, hand-written target (job mco-exporter, served as a static file):
# what the fleet does not cover. ``resctrl`` worked, then failed (the second branch of
# MCOCollectorFailing); ``perf_llc`` never worked (no alert: a host without a PMU).
STATIC_NODE = "node-00001"


def static_exposition(resctrl: int) -> str:
    return (
        f'mco_exporter_collector_success{{node="{STATIC_NODE}",collector="diskstats"}} 0\n'
        f'mco_exporter_collector_success{{node="{STATIC_NODE}",collector="meminfo"}} 1\n'
        f'mco_exporter_collector_success{{node="{STATIC_NODE}",collector="perf_llc"}} 0\n'
        f'mco_exporter_collector_success{{node="{STATIC_NODE}",collector="resctrl"}} {resctrl}\n'
        "mco_reporter_last_sync_timestamp_seconds 1700000000\n"  # long ago: stale
        "mco_rulegen_config_accepted 0\n"
        "mco_rulegen_leader 1\n"
    )


class AlertSink:
    """The Alertmanager vmalert needs (this vmalert has no -notifier.blackhole): it keeps what
    vmalert posts to ``/api/v2/alerts``, so the notifications can be checked too."""

    def __init__(self) -> None:
        self.posted: list[dict[str, Any]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.endswith("/api/v2/alerts"):
                    sink.posted.extend(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> AlertSink:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def firing(self) -> set[frozenset[tuple[str, str]]]:
        """Label sets of the alerts vmalert has notified as firing (``endsAt`` ahead)."""
        now = time.time()
        return {
            frozenset(a["labels"].items())
            for a in self.posted
            if datetime.fromisoformat(a["endsAt"].replace("Z", "+00:00")).timestamp() > now
        }


@dataclass
class Engines:
    config: DetectionRuleConfig
    prom: Prometheus
    vm: VictoriaMetrics
    vmalert: VMAlert
    sink: AlertSink
    fleet: ScrapeTarget
    static: ScrapeTarget
    down: ScrapeTarget


@pytest.fixture(scope="module")
def engines(tmp_path_factory, fleet_target) -> Iterator[Engines]:
    """Prometheus, and VictoriaMetrics + vmalert, evaluating the whole rule file (recording
    group and alerts group) on the fleet, the static target and a target that is down."""
    tmp_path = tmp_path_factory.mktemp("engines")
    config = load_config(ENGINE_CONFIG)
    # Each engine evaluates its own render: Prometheus reads the series recorded earlier in the
    # same evaluation over half an interval, vmalert (reading back through VictoriaMetrics)
    # does not.
    rules = tmp_path / "rules.yaml"
    rules.write_text(shortened_alerts(render_rules(config, generation=7), hold="2s"))
    vm_rules = tmp_path / "rules-victoriametrics.yaml"
    vm_rules.write_text(
        shortened_alerts(render_rules(config, generation=7, engine="victoriametrics"), hold="2s")
    )
    static_dir = tmp_path / "static"
    static_dir.mkdir()
    (static_dir / "metrics").write_text(static_exposition(resctrl=1))
    static_port = free_port()
    static_server = Managed(
        [
            sys.executable,
            "-m",
            "http.server",
            str(static_port),
            "--bind=127.0.0.1",
            f"--directory={static_dir}",
        ],
        name="static-target",
        log_path=tmp_path / "static.log",
    )
    static = ScrapeTarget("mco-exporter", f"127.0.0.1:{static_port}")
    down = ScrapeTarget("mco-exporter", f"127.0.0.1:{free_port()}", {"node": "node-down"})
    targets = [fleet_target, static, down]
    prom = Prometheus(tmp_path / "prom", targets=targets, rule_files=[rules])
    vm = VictoriaMetrics(tmp_path / "vm", targets=targets)
    with AlertSink() as sink, running(static_server):
        static_server.wait_http(f"http://127.0.0.1:{static_port}/metrics")
        with running(prom, vm):
            vmalert = VMAlert(
                tmp_path / "vmalert",
                rule_files=[vm_rules],
                datasource_url=vm.url,
                remote_write_url=vm.url,
                notifier_url=sink.url,
                # Prometheus adds no group label to alerts; compare like with like.
                extra_args=["-disableAlertgroupLabel"],
            )
            with running(vmalert):
                # Both engines must have seen resctrl working before it fails.
                worked = (
                    "max_over_time(mco_exporter_collector_success"
                    f'{{collector="resctrl",instance="{static.address}"}}[1h])'
                )
                engine: Prometheus | VictoriaMetrics
                for engine in (prom, vm):
                    wait_until(
                        functools.partial(lambda e: e.value(worked) == 1, engine),
                        timeout=30,
                        what=f"resctrl success in {engine.name}",
                    )
                replacement = static_dir / "metrics.new"
                replacement.write_text(static_exposition(resctrl=0))
                replacement.replace(static_dir / "metrics")
                yield Engines(config, prom, vm, vmalert, sink, fleet_target, static, down)


def test_prometheus_and_vmalert_agree_with_the_model_on_every_branch(engines):
    config = engines.config
    want = fleet_expected(config)
    # Sanity of the fixture itself: every profile is scored differently from the others.
    assert (
        len({want.get((n, S.INTERFERENCE_LEVEL, ())) for n in F.node_names(len(F.PROFILES))}) >= 5
    )
    results: dict[str, dict[Key, float]] = {}

    def converged(engine: Any, name: str) -> bool:
        results[name] = engine_values(engine.query(RECORDED_SELECTOR))
        return not differences(results[name], want, rel=1e-9)

    # Prometheus converges within one window; vmalert reads its own results back through
    # VictoriaMetrics, so each chained rule lags (new series become searchable after a few
    # seconds there).
    try:
        wait_until(
            lambda: converged(engines.prom, "prometheus"), timeout=60, interval=1, what="Prometheus"
        )
        wait_until(
            lambda: converged(engines.vm, "vmalert"), timeout=180, interval=2, what="vmalert"
        )
    except TimeoutError:
        report = {n: differences(v, want, rel=1e-9) for n, v in results.items()}
        pytest.fail(f"engines disagree with the model: {report}")
    assert results["prometheus"].keys() == results["vmalert"].keys() == want.keys()
    for key, value in results["prometheus"].items():
        assert math.isclose(value, results["vmalert"][key], rel_tol=1e-9, abs_tol=1e-12), key


AlertKey = frozenset[tuple[str, str]]


def expected_alerts(engines: Engines) -> set[AlertKey]:
    """The alerts the model and the inputs say must fire, with their full label sets."""
    config, want = engines.config, fleet_expected(engines.config)
    nodes = F.assign(F.node_names(len(F.PROFILES)), list(F.PROFILES))
    fleet = {"job": engines.fleet.job, "instance": engines.fleet.address}
    static = {"job": engines.static.job, "instance": engines.static.address}
    out: list[dict[str, str]] = [
        {"alertname": "MCOExporterDown", "severity": "warning", "job": engines.down.job,
         "instance": engines.down.address, **engines.down.labels},
        {"alertname": "MCOReportStale", "severity": "warning"},
        {"alertname": "MCODetectionRuleConfigRejected", "severity": "warning", **static},
    ]  # fmt: skip
    for collector in ("diskstats", "resctrl"):  # required and failing; worked, then failed
        out.append(
            {"alertname": "MCOCollectorFailing", "severity": "warning", "node": STATIC_NODE,
             "collector": collector, **static}
        )  # fmt: skip
    for node, profile in nodes.items():
        if any(s.name == "mco_pressure_available" and s.base == 0 for s in profile.series):
            out.append(
                {"alertname": "MCOPSIUnavailable", "severity": "info", "node": node, **fleet}
            )
    for (node, name, labels), value in want.items():
        if name == S.INTERFERENCE_LEVEL and value >= config.alerts.node_interfered_level:
            out.append({"alertname": "MCONodeInterfered", "severity": "warning", "node": node})
        if name == S.HARD_CONSTRAINT_VIOLATED and value == 1:
            out.append(
                {"alertname": "MCOHardConstraintViolated", "severity": "warning", "node": node,
                 **dict(labels)}
            )  # fmt: skip
    return {frozenset(a.items()) for a in out}


def firing(alerts: list[dict[str, Any]]) -> dict[AlertKey, dict[str, str]]:
    """/api/v1/alerts (Prometheus and vmalert answer alike): firing label set -> annotations."""
    return {
        frozenset(a["labels"].items()): a["annotations"] for a in alerts if a["state"] == "firing"
    }


def test_prometheus_and_vmalert_fire_the_same_alerts(engines):
    want = expected_alerts(engines)
    names = {dict(a)["alertname"] for a in want}
    # The inputs make every kind of alert fire but MCOReporterAbsent (the heartbeat is there).
    assert len(names) == 7 and "MCOReporterAbsent" not in names, names
    assert sum(dict(a)["alertname"] == "MCONodeInterfered" for a in want) >= 2
    assert sum(dict(a)["alertname"] == "MCOHardConstraintViolated" for a in want) >= 1
    got: dict[str, dict[AlertKey, dict[str, str]]] = {}

    def converged(name: str, url: str) -> bool:
        got[name] = firing(
            requests.get(f"{url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        )
        return got[name].keys() == want

    try:
        wait_until(lambda: converged("prometheus", engines.prom.url), timeout=60, interval=1)
        # vmalert's alerts on recorded series wait for the chain of recording rules.
        wait_until(lambda: converged("vmalert", engines.vmalert.url), timeout=120, interval=2)
        # Notifications follow vmalert's evaluations of the 30 s alert group: allow three.
        wait_until(lambda: engines.sink.firing() == want, timeout=90, interval=1)
    except TimeoutError:
        seen = {name: set(alerts) for name, alerts in got.items()}
        seen["notified"] = engines.sink.firing()
        report = {
            name: {"missing": want - keys, "unexpected": keys - want} for name, keys in seen.items()
        }
        pytest.fail(f"alerts disagree: {report}")
    # The annotation templates expand alike in both (MCOReportStale's $value grows with time).
    for key, expanded in got["prometheus"].items():
        if dict(key)["alertname"] != "MCOReportStale":
            assert got["vmalert"][key] == expanded, dict(key)


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_fleet_profiles_are_valid_exposition(tmp_path):
    """promtool check metrics parses the synthetic exposition (no duplicate series etc.)."""
    text = F.Fleet(F.assign(F.node_names(len(F.PROFILES)), list(F.PROFILES)), start_ms=0).render(
        1000
    )
    # Timestamps are fine for Prometheus but promtool's linter only checks names and types.
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=text,
        capture_output=True,
        text=False,
        timeout=30,
        check=False,
    )
    assert result.returncode in (0, 3), result.stderr  # 3: lint findings (no HELP/TYPE lines)
    assert b"error" not in result.stderr.lower(), result.stderr
