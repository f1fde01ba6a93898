"""Merge patches: applying the diff gives the target, and removed keys are sent as null."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from reporter.patch import apply_merge_patch, merge_diff

scalars = st.one_of(
    st.booleans(), st.integers(-5, 5), st.floats(allow_nan=False), st.text(max_size=3)
)
values = st.recursive(
    scalars | st.lists(scalars, max_size=3),
    lambda children: st.dictionaries(st.text(max_size=3), children, max_size=4),
    max_leaves=12,
)
documents = st.dictionaries(st.text(max_size=3), values, max_size=5)


@settings(max_examples=300, deadline=None)
@given(old=documents, new=documents)
def test_diff_applied_to_old_gives_new(old, new) -> None:
    patch = merge_diff(old, new)
    assert apply_merge_patch(old, patch) == new
    if old == new:
        assert patch == {}


def test_removed_fields_and_nodes_are_nulled_and_lists_replaced() -> None:
    old = {
        "nodes": {
            "a": {"level": 0.1, "reasons": ["x"], "signals": {"p": 1.0, "q": 2.0}},
            "b": {"level": 0.2},
        }
    }
    new = {"nodes": {"a": {"level": 0.1, "signals": {"p": 1.5}}}}
    assert merge_diff(old, new) == {
        "nodes": {"a": {"reasons": None, "signals": {"p": 1.5, "q": None}}, "b": None}
    }
