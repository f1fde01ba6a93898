"""Volcano's fast prefix decoding must read exactly what a full decode reads, or fall back."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from extender import volcano
from extender.config import VerdictConfig
from extender.wire import BadRequest
from testkit import bodies

CONFIG = VerdictConfig()


def full_predicate(body: bytes) -> volcano.PredicateArgs:
    return volcano._predicate.decode(body)


def full_prioritize(body: bytes) -> volcano.PrioritizeArgs:
    return volcano._prioritize.decode(body)


@pytest.mark.parametrize("tasks", [1, 12, 21, 40])
@pytest.mark.parametrize("kata", [None, True, False])
@pytest.mark.parametrize("runtime_class", [None, "kata-qemu"])
def test_predicate_fast_path_matches_full_decode(tasks, kata, runtime_class):
    body = bodies.volcano_predicate(
        "gpu-node-07", tasks=tasks, runtime_class=runtime_class, kata=kata
    )
    fast = volcano._fast_predicate(body)
    if len(body) >= volcano.FAST_PATH_MIN_BYTES:
        assert fast is not None, "a Go-encoded body must take the fast path"
    assert volcano.decode_predicate(body) == full_predicate(body)
    args = volcano.decode_predicate(bytearray(body))
    assert args.node is not None and args.node.name == "gpu-node-07"
    assert args.task is not None and args.task.pod is not None
    assert args.task.pod.runtime_class == runtime_class
    label = args.node.node.facts().kata_label if args.node.node else None
    assert label is (kata is True)  # the Node came with the request: no label reads as False


def _predicate_dict(**overrides: Any) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(bodies.volcano_predicate("n1", tasks=8, kata=True))
    doc.update(overrides)
    return doc


def tricky_bodies() -> list[tuple[str, bytes]]:
    cases = []
    doc = _predicate_dict()
    doc["node"]["Node"]["metadata"]["labels"]["State"] = "x"  # a "State" key inside the Node
    doc["node"]["Node"]["metadata"]["annotations"]["note"] = ',"State":{"Phase":1}'
    cases.append(("State inside Node", bodies.go_json(doc)))
    doc = _predicate_dict()
    doc["task"]["Pod"]["metadata"]["labels"]["node"] = "n9"
    doc["task"]["Pod"]["spec"]["nodeSelector"] = {"node": "n9"}
    cases.append(("node keys inside the task", bodies.go_json(doc)))
    doc = _predicate_dict()
    node = doc["node"]
    doc["node"] = {"State": node.pop("State"), **node}  # State before Node: order changed
    cases.append(("State first", bodies.go_json(doc)))
    doc = _predicate_dict()
    doc = {"node": doc["node"], "task": doc["task"]}  # node before task
    cases.append(("node first", bodies.go_json(doc)))
    cases.append(("pretty printed", json.dumps(_predicate_dict(), indent=2).encode()))
    doc = _predicate_dict()
    doc["node"]["Node"] = None
    cases.append(("null Node", bodies.go_json(doc)))
    doc = _predicate_dict()
    doc["task"]["Pod"] = None
    cases.append(("null Pod", bodies.go_json(doc)))
    return cases


@pytest.mark.parametrize(("name", "body"), tricky_bodies(), ids=[c[0] for c in tricky_bodies()])
def test_predicate_tricky_bodies_read_the_same(name, body):
    assert volcano.decode_predicate(body) == full_predicate(body)


def test_predicate_body_cut_short_is_a_bad_request():
    body = bodies.volcano_predicate("n1")
    middle = len(body) // 2
    while body[middle - 2 : middle] == b"}}":
        middle += 1  # the fast path does not read past the node head: see docs/extender.md
    for cut in (middle, len(body) - 1, 40):
        with pytest.raises(BadRequest):
            volcano.decode_predicate(body[:cut])


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    shuffle_node=st.booleans(),
    extra_labels=st.dictionaries(
        st.sampled_from(["State", "node", "Name", "katacontainers.io/kata-runtime", "x"]),
        st.sampled_from(['","State":{', "}},{", '"Name":"', "true", "false"]),
        max_size=3,
    ),
)
def test_predicate_fast_path_never_reads_differently(seed, shuffle_node, extra_labels):
    doc = _predicate_dict()
    doc["node"]["Node"]["metadata"]["labels"].update(extra_labels)
    doc["task"]["Pod"]["metadata"]["labels"].update(extra_labels)
    if shuffle_node:
        items = list(doc["node"].items())
        random.Random(seed).shuffle(items)
        doc["node"] = dict(items)
    body = bodies.go_json(doc)
    assert volcano.decode_predicate(body) == full_predicate(body)


@pytest.mark.parametrize("runtime_class", [None, "kata-qemu"])
def test_prioritize_fast_path_finds_every_node(runtime_class):
    names = [f"node-{i:03d}" for i in range(40)]
    body = bodies.volcano_prioritize(names, tasks=2, runtime_class=runtime_class)
    fast = volcano._fast_prioritize(body, CONFIG)
    assert fast is not None and fast.nodes is not None
    full = full_prioritize(body)
    assert full.nodes is not None
    assert [n.name for n in fast.nodes] == names == [n.name for n in full.nodes]
    assert fast.task == full.task
    if runtime_class:  # Kata pods read every node's labels too
        assert fast.nodes == full.nodes


def test_prioritize_skips_name_objects_that_are_not_nodes():
    doc = json.loads(bodies.volcano_prioritize(["n1", "n2", "n3"], tasks=4))
    for info in doc["nodes"]:  # device-sharing state with Name-first objects, as vGPU has
        info["Others"] = {"vgpu": [{"Name": "gpu0", "Score": 1}, {"Name": "gpu1", "Score": 0}]}
    body = bodies.go_json(doc)
    args = volcano.decode_prioritize(body, CONFIG)
    assert [n.name for n in args.nodes or []] == ["n1", "n2", "n3"]


@pytest.mark.parametrize("runtime_class", [None, "kata-qemu"])
def test_prioritize_falls_back_when_the_key_order_is_not_go_s(runtime_class):
    doc = json.loads(bodies.volcano_prioritize(["n1", "n2"], tasks=6, runtime_class=runtime_class))
    doc["nodes"] = [
        {"Node": n["Node"], "Tasks": n["Tasks"], "Name": n["Name"]} for n in doc["nodes"]
    ]
    body = bodies.go_json(doc)
    assert volcano._fast_prioritize(body, CONFIG) is None
    assert [n.name for n in volcano.decode_prioritize(body, CONFIG).nodes or []] == ["n1", "n2"]


@pytest.mark.parametrize("body", [b"", b"   ", b"{", b"[]", b'{"task": 5}', b'{"nodes": {}}'])
def test_prioritize_bad_bodies(body):
    with pytest.raises(BadRequest):
        volcano.decode_prioritize(body, CONFIG)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"null",
        b"{}",
        b'{"node": {"Name": ""}}',
        b'{"node": {"Name": 7}}',
        b'{"task": [], "node": {"Name": "n"}}',
    ],
)
def test_predicate_bad_bodies(body):
    with pytest.raises(BadRequest):
        volcano.decode_predicate(body)


def _large_with_bad_name(body: bytes, name: bytes) -> bytes:
    """A body past the fast-path size whose node name is not UTF-8 (``name`` replaced)."""
    bad = body.replace(b'"Name":"' + name + b'"', b'"Name":"n\xff\xfe"')
    assert bad != body and len(bad) >= volcano.FAST_PATH_MIN_BYTES
    return bad


@pytest.mark.parametrize("runtime_class", [None, "kata-qemu"])
def test_large_prioritize_with_invalid_utf8_is_a_bad_request(runtime_class):
    """The fast paths meet bytes the full decode would refuse: they must fall back to it (a
    400), never raise anything else (a 500)."""
    body = bodies.volcano_prioritize(["n1", "n2"], runtime_class=runtime_class)
    with pytest.raises(BadRequest):
        volcano.decode_prioritize(_large_with_bad_name(body, b"n2"), CONFIG)


def test_large_predicate_with_invalid_utf8_is_a_bad_request():
    body = bodies.volcano_predicate("n1")
    with pytest.raises(BadRequest):
        volcano.decode_predicate(_large_with_bad_name(body, b"n1"))
