"""Victims and aggressors: the query on a real engine (promtool), the parse, and the tracker's
rule that a node's lists are rewritten only when they change."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import msgspec
import pytest
import yaml

from reporter import culprits
from reporter.entries import EntryBuilder, Epsilon
from reporter.query import Kind, Plan, TaggedSample
from reporter.schema import PodRef
from reporter.shards import merge
from reporter.tracker import Tracker
from rulegen.model import DetectionRuleConfig, load_config
from rulegen.render import render_rules
from testkit.answers import T0, quiet_values, snapshot
from tests.rulegen.test_promtool import SUITES, TEST_CONFIG, promtool

MiB = 1 << 20


def _suite(config: DetectionRuleConfig) -> dict[str, Any]:
    """pods.test.yaml's nodes (docs in that file) with kube_pod_info for some of the pods, and
    the reporter's query as the one expression to check at 90 s."""
    suite: dict[str, Any] = yaml.safe_load((SUITES / "pods.test.yaml").read_text())
    test = suite["tests"][0]
    # The pods' controllers as kube-state-metrics labels them: what workload profiles key on.
    for uid, namespace, pod, kind, owner in (
        ("vic", "shop", "cart-0", "StatefulSet", "cart"),
        ("agg", "batch", "etl-1", "ReplicaSet", "etl-5d8f7b9c4"),
    ):
        test["input_series"].append(
            {
                "series": f'kube_pod_info{{job="kube-state-metrics",uid="{uid}",'
                f'namespace="{namespace}",pod="{pod}",node="cross",host_ip="10.0.0.1",'
                f'created_by_kind="{kind}",created_by_name="{owner}"}}',
                "values": "1+0x120",
            }
        )
    # LLC: on cross the cache misses 90 % of its references (cache_pollution triggered), and
    # resctrl MON groups named after two of its pods hold 12 MiB (two L3 domains) and 2 MiB; a
    # group that is not a pod's is no aggressor. iovic has a pod's group but no cache pollution.
    exporter = 'job="mco-exporter",instance="{0}:9847",node="{0}"'
    llc = [
        (f"mco_llc_references_total{{{exporter.format('cross')}}}", "0+1000000x120"),
        (f"mco_llc_misses_total{{{exporter.format('cross')}}}", "0+900000x120"),
    ]
    for node, group, domain, size in (
        ("cross", "/mon_groups/podagg", "0", 8 * MiB),
        ("cross", "/mon_groups/podagg", "1", 4 * MiB),
        ("cross", "/BE/mon_groups/podvic", "0", 2 * MiB),
        ("cross", "/BE", "0", 100 * MiB),
        ("iovic", "/mon_groups/podv", "0", 50 * MiB),
    ):
        labels = f'{exporter.format(node)},domain="{domain}",group="{group}",type="mon"'
        llc.append((f"mco_llc_occupancy_bytes{{{labels}}}", f"{size}+0x120"))
    test["input_series"] += [{"series": name, "values": values} for name, values in llc]
    usage_agg = 268435456 + MiB * 90  # grows 1 MiB/s from 256 MiB
    test["promql_expr_test"] = [
        {
            "expr": culprits.query(config),
            "eval_time": "90s",
            "exp_samples": [
                # cross: both pods stall on memory above warn (0.125) without a limit of their
                # own; named from kube_pod_info. agg holds the most memory on the node: its
                # stall is its own doing, so it is the aggressor only, and vic, the victim, is
                # not an aggressor of the memory it lacks (a pod is never both).
                _exp("victims", "memory", "cross", "vic", "guaranteed", 0.375, "shop", "cart-0"),
                _exp(
                    "aggressors", "memory", "cross", "agg", "burstable", usage_agg, "batch", "etl-1"
                ),
                # cross: the pods' resctrl groups by occupancy, summed over domains.
                _exp("aggressors", "llc", "cross", "agg", "burstable", 12 * MiB, "batch", "etl-1"),
                _exp("aggressors", "llc", "cross", "vic", "guaranteed", 2 * MiB, "shop", "cart-0"),
                # iovic: v stalls (0.5 >= warn 0.25) far below its limit; w writes 100 MiB/s and
                # stalls below warn. No kube_pod_info for them: UID only. v's own 1 KiB/s of
                # reads do not make the victim an I/O aggressor.
                _exp("victims", "io", "iovic", "v", "burstable", 0.5),
                _exp("aggressors", "io", "iovic", "w", "burstable", 100 * MiB),
                # self, near, iolim: every stalling pod is at its own limit: no list at all.
            ],
        }
    ]
    return suite


OWNERS = {
    "cart-0": {"created_by_kind": "StatefulSet", "created_by_name": "cart"},
    "etl-1": {"created_by_kind": "ReplicaSet", "created_by_name": "etl-5d8f7b9c4"},
}


def _exp(
    role: str,
    resource: str,
    node: str,
    uid: str,
    qos: str,
    value: float,
    namespace: str = "",
    pod: str = "",
) -> dict[str, Any]:
    labels = {"node": node, "pod_uid": uid, "qos": qos, "role": role, "resource": resource}
    if role == "victims":
        labels["kind"] = "some"
    if namespace:
        labels |= {"namespace": namespace, "pod": pod}
        labels |= OWNERS[pod]
    elif role == "victims":
        labels["__name__"] = "node_pod:mco_pressure_ratio:smoothed"
    text = ",".join(f'{k}="{v}"' for k, v in labels.items() if k != "__name__")
    return {"labels": labels.get("__name__", "") + "{" + text + "}", "value": value}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
def test_the_query_ranks_victims_and_aggressors_and_names_them_on_a_real_engine(
    tmp_path: Path,
) -> None:
    config = load_config(TEST_CONFIG)
    (tmp_path / "rules.yaml").write_text(render_rules(config, generation=7))
    (tmp_path / "culprits.test.yaml").write_text(yaml.safe_dump(_suite(config), width=1000))
    result = promtool("test", "rules", "culprits.test.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def _sample(node: str, role: str, resource: str, uid: str, value: float) -> TaggedSample:
    return msgspec.convert(
        {
            "metric": {
                "node": node,
                "pod_uid": uid,
                "qos": "burstable",
                "role": role,
                "resource": resource,
            },
            "value": [T0, value],
        },
        TaggedSample,
    )


def _parse(samples: list[TaggedSample]) -> dict[str, culprits.Culprits]:
    return culprits.parse([s.metric for s in samples], [s.value.value for s in samples])


def test_parse_bounds_and_orders_the_lists_stably() -> None:
    samples = [_sample("n", "victims", "memory", f"p{i}", 0.5) for i in range(5)]
    samples += [_sample("n", "victims", "io", "q", 0.75)]
    samples += [_sample("n", "aggressors", "io", f"w{i}", float(i)) for i in range(5)]
    samples += [_sample("n", "aggressors", "memory", "m", 7.0)]
    samples += [_sample("n", "aggressors", "cpu", "x", 9.0), _sample("", "victims", "io", "y", 1)]
    samples += [_sample("n", "victims", "io", "nan", float("nan"))]
    got = _parse(list(reversed(samples)))["n"]
    # Worst first; ties by UID, so the same answer in another order gives the same list.
    assert [(p.pod_uid, p.resource) for p in got.victims] == [
        ("q", "io"),
        ("p0", "memory"),
        ("p1", "memory"),
    ]
    assert got.victims == _parse(samples)["n"].victims
    # Per resource (memory, then io), largest first, at most TOP each; unknown ones skipped.
    assert [p.pod_uid for p in got.aggressors] == ["m", "w4", "w3", "w2"]


PLAN = Plan(compact=False)
CONFIG = DetectionRuleConfig.default()


def _tracker(plan: Plan = PLAN) -> Tracker:
    return Tracker(EntryBuilder(plan, CONFIG, Epsilon()), stale_after=30.0, live_within=5.0)


def _ref(uid: str, value: float, resource: str = "memory") -> PodRef:
    return PodRef(uid, resource, value, "burstable", "ns", uid)


def _apply(t: Tracker, at: float, victims: tuple[PodRef, ...]) -> bool:
    snap = snapshot(t.builder.plan, {"n": quiet_values(t.builder.plan)}, at)
    snap.culprits = {"n": culprits.Culprits(victims, (_ref("a", 64.0 * MiB),))}
    return t.apply(snap).changed == 1


def test_lists_are_written_only_when_a_pod_or_a_value_changes() -> None:
    t = _tracker()
    assert _apply(t, T0, (_ref("v", 0.5), _ref("w", 0.25)))
    entry = t.entries["n"]
    assert [p.pod_uid for p in entry.victims] == ["v", "w"]
    assert [p.name for p in entry.aggressors] == ["a"]
    # Within epsilon (5 % of the value), and the same two pods in the other order: no write.
    assert not _apply(t, T0 + 1, (_ref("w", 0.24), _ref("v", 0.51)))
    assert t.entries["n"] is entry
    # A value beyond epsilon, a pod that enters, a pod that leaves: each one write.
    assert _apply(t, T0 + 2, (_ref("v", 0.6), _ref("w", 0.25)))
    assert _apply(t, T0 + 3, (_ref("v", 0.6), _ref("w", 0.25), _ref("x", 0.02)))
    assert _apply(t, T0 + 4, (_ref("v", 0.6),))
    assert _apply(t, T0 + 5, ())
    assert t.entries["n"].victims == []
    assert b"victims" not in msgspec.json.encode(t.entries["n"])  # empty: left out
    assert not _apply(t, T0 + 6, ())


def test_a_compact_report_leaves_the_lists_out() -> None:
    t = _tracker(Plan(compact=True))
    assert _apply(t, T0, (_ref("v", 0.5),))
    assert t.entries["n"].victims == [] and t.entries["n"].aggressors == []
    assert not _apply(t, T0 + 1, (_ref("v", 0.9),))


def test_a_restarted_reporter_keeps_written_lists_until_they_change() -> None:
    first = _tracker()
    _apply(first, T0, (_ref("v", 0.5),))
    t = _tracker()
    t.seed(dict(first.entries))
    assert not _apply(t, T0 + 1, (_ref("v", 0.5),))
    assert _apply(t, T0 + 2, (_ref("v", 0.5), _ref("w", 0.5)))


def test_node_psi_standing_in_is_flagged() -> None:
    t = _tracker()
    values = quiet_values(PLAN)
    values[(Kind.POD_FALLBACK, "")] = 1.0
    t.apply(snapshot(PLAN, {"n": values}, T0))
    entry = t.entries["n"]
    assert entry.pod_fallback and "fallback:pod_pressure" in entry.reasons
    values[(Kind.POD_FALLBACK, "")] = 0.0
    t.apply(snapshot(PLAN, {"n": values}, T0 + 1))
    assert not t.entries["n"].pod_fallback and "fallback:pod_pressure" not in t.entries["n"].reasons


def test_sharded_a_nodes_lists_come_from_the_shard_its_sample_came_from() -> None:
    a = snapshot(PLAN, {"n": quiet_values(PLAN)}, T0, {"n": T0 - 3})
    b = snapshot(
        PLAN, {"n": quiet_values(PLAN), "m": quiet_values(PLAN)}, T0, {"n": T0 - 1, "m": T0 - 1}
    )
    a.culprits = {"n": culprits.Culprits((_ref("old", 0.5),))}
    b.culprits = {
        "n": culprits.Culprits((_ref("new", 0.5),)),
        "m": culprits.Culprits((_ref("m", 0.2),)),
    }
    merged = merge(PLAN, [("http://a", a), ("http://b", b)], {})
    assert merged.snapshot is not None
    assert [p.pod_uid for p in merged.snapshot.culprits["n"].victims] == ["new"]  # b is newer
    assert [p.pod_uid for p in merged.snapshot.culprits["m"].victims] == ["m"]
