"""Workload profiles: the workload key, attribution from parsed lists, decay, the bound on
workloads and on the published size, and the engine publishing and seeding them."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from mco.workload import MAX_KEY, workload_key
from reporter import culprits
from reporter.culprits import Culprits
from reporter.profiles import PROFILE_BYTES, ProfileBook
from reporter.query import TaggedLabels
from reporter.schema import PodRef
from testkit.answers import T0

MiB = 1 << 20
HOUR = 3600.0


@pytest.mark.parametrize(
    ("kind", "owner", "pod", "key"),
    [
        ("ReplicaSet", "web-5d8f7b9c4", "web-5d8f7b9c4-x2k8p", "ns/Deployment/web"),
        ("ReplicaSet", "web", "web-x2k8p", "ns/ReplicaSet/web"),  # no template hash: itself
        ("StatefulSet", "db", "db-0", "ns/StatefulSet/db"),
        ("DaemonSet", "agent", "agent-x2k8p", "ns/DaemonSet/agent"),
        ("Job", "backup-28930150", "backup-28930150-x2k8p", "ns/CronJob/backup"),
        ("Job", "etl", "etl-x2k8p", "ns/Job/etl"),
        ("<none>", "<none>", "scratch-7c9f4", "ns/Pod/scratch"),
        ("", "", "solo", "ns/Pod/solo"),
        ("", "", "", ""),
    ],
)
def test_the_workload_is_the_pods_controller(kind: str, owner: str, pod: str, key: str) -> None:
    assert workload_key("ns", kind, owner, pod) == key


def _labels(uid: str, role: str, resource: str, kind: str, owner: str) -> TaggedLabels:
    return TaggedLabels(
        node="n", role=role, pod_uid=uid, qos="burstable", resource=resource,
        namespace="shop", pod=f"{uid}-0", created_by_kind=kind, created_by_name=owner,
    )  # fmt: skip


def test_parse_names_each_pods_workload_from_its_owner() -> None:
    pods = [
        _labels("v", "victims", "memory", "StatefulSet", "cart"),
        _labels("a", "aggressors", "memory", "ReplicaSet", "etl-5d8f7b9c4"),
        TaggedLabels(node="n", role="aggressors", pod_uid="u", qos="burstable", resource="io"),
    ]
    got = culprits.parse(pods, [0.5, 64.0 * MiB, 1.0])["n"]
    assert [p.workload for p in got.victims] == ["shop/StatefulSet/cart"]
    # Without kube_pod_info there is no namespace, hence no workload: nothing is learned.
    assert {p.pod_uid: p.workload for p in got.aggressors} == {"a": "shop/Deployment/etl", "u": ""}


def _ref(workload: str, resource: str, value: float) -> PodRef:
    return PodRef(workload, resource, value, "burstable", "ns", workload, workload)


def _cycle(victims: list[PodRef], aggressors: list[PodRef]) -> dict[str, Culprits]:
    return {"n": Culprits(tuple(victims), tuple(aggressors))}


def _published(book: ProfileBook, at: float) -> dict[str, Any]:
    return {p.workload: msgspec.to_builtins(p) for p in book.published(at)}


def test_aggressors_share_the_blame_and_victims_keep_their_stall() -> None:
    book = ProfileBook(half_life=HOUR)
    for i in range(4):
        book.observe(
            _cycle([_ref("redis", "memory", 0.4)],
                   [_ref("etl", "memory", 3 * MiB), _ref("web", "memory", 1 * MiB)]),
            T0 + i,
        )  # fmt: skip
    got = _published(book, T0 + 3)
    assert got["etl"]["resources"]["memory"]["aggressor"] == 0.75
    assert got["web"]["resources"]["memory"]["aggressor"] == 0.25
    assert got["redis"]["resources"]["memory"]["victim"] == 0.4
    assert "aggressor" not in got["redis"]["resources"]["memory"]  # 0: left out
    # Four cycles, a second apart: four samples each, barely decayed.
    assert got["etl"]["observations"] == pytest.approx(4.0, abs=0.01)


def test_evidence_halves_every_half_life_and_new_behaviour_takes_over() -> None:
    book = ProfileBook(half_life=HOUR)
    for i in range(8):
        book.observe(_cycle([], [_ref("etl", "io", 1.0)]), T0 + i)
    assert _published(book, T0 + 7 + HOUR)["etl"]["observations"] == pytest.approx(4.0, 0.01)
    assert _published(book, T0 + 7 + 2 * HOUR)["etl"]["observations"] == pytest.approx(2.0, 0.01)
    # Now it shares the disk with a larger writer: its intensity moves toward the new share,
    # and the old samples, two half-lives old, weigh a quarter of what they did.
    at = T0 + 7 + 2 * HOUR
    for i in range(6):
        book.observe(_cycle([], [_ref("etl", "io", 1.0), _ref("big", "io", 3.0)]), at + i)
    got = _published(book, at + 5)["etl"]["resources"]["io"]["aggressor"]
    assert got == pytest.approx((2 * 1.0 + 6 * 0.25) / 8, abs=0.01)
    # Gone quiet for long: forgotten at publication.
    assert "etl" not in _published(book, at + 20 * HOUR)


def test_the_book_keeps_the_most_observed_workloads_within_its_bound() -> None:
    book = ProfileBook(half_life=HOUR, max_workloads=10)
    for i in range(5):  # five workloads named every cycle
        book.observe(_cycle([], [_ref(f"keep{j}", "llc", MiB) for j in range(5)]), T0 + i)
    for j in range(40):  # forty named once each
        book.observe(_cycle([], [_ref(f"once{j}", "llc", MiB)]), T0 + 5 + j)
        assert len(book) <= 10
    kept = _published(book, T0 + 50)
    assert {f"keep{j}" for j in range(5)} <= kept.keys()
    assert len(kept) <= 10
    # The once-seen that stayed are the newest ones (ties on count go by last seen).
    assert "once39" in kept and "once0" not in kept


def test_published_profiles_are_bounded_at_ten_thousand_nodes() -> None:
    book = ProfileBook(half_life=HOUR, max_workloads=500)
    # 10,000 nodes, each naming three victims and three aggressors of each resource, every one
    # of a distinct workload whose key is as long as a key gets.
    long = "x" * MAX_KEY
    nodes: dict[str, Culprits] = {}
    for n in range(10_000):
        victims = tuple(_ref(f"{n}v{i}{long}"[:MAX_KEY], "memory", 0.3) for i in range(3))
        aggressors = tuple(
            _ref(f"{n}{r}{i}{long}"[:MAX_KEY], r, MiB)
            for r in ("memory", "io", "llc")
            for i in range(3)
        )
        nodes[f"node-{n}"] = Culprits(victims, aggressors)
    book.observe(nodes, T0)
    published = book.published(T0)
    assert len(published) <= 500
    size = len(msgspec.json.encode(published))
    assert size <= 500 * PROFILE_BYTES
    # One profile at its largest (every resource, both roles) stays within PROFILE_BYTES.
    for r in ("memory", "io", "llc"):
        book.observe(
            {"m": Culprits((_ref(long, r, 0.123456),), (_ref(long, r, 1.0), _ref("y", r, 2.0)))},
            T0 + 1,
        )
    big = next(p for p in book.published(T0 + 1.123) if p.workload == long)
    assert len(big.resources) == 3
    assert len(msgspec.json.encode(big)) <= PROFILE_BYTES


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="half-life"):
        ProfileBook(half_life=0)
    with pytest.raises(ValueError, match="at least one"):
        ProfileBook(max_workloads=0)


def test_a_new_leader_goes_on_from_the_published_profiles() -> None:
    book = ProfileBook(half_life=HOUR)
    for i in range(10):
        book.observe(_cycle([_ref("redis", "io", 0.5)], [_ref("etl", "io", 1.0)]), T0 + i)
    published = book.published(T0 + 9)
    again = ProfileBook(half_life=HOUR)
    again.seed(published, T0 + 9)
    assert _published(again, T0 + 9) == _published(book, T0 + 9)
