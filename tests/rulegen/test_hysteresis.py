"""Hysteresis of the hard constraints in promtool: the generated violated rule, fed exceeded
sample by sample, against the plain-Python definition (testkit/rule_reference.py ``held``)
at every evaluation, and against the behaviour the issue asks for, stated by hand: a blip
never filters, a sustained excess filters after holdFor, a node is admitted again only after
clearAfter, and flapping keeps a held node held.

Prometheus 2.x ranges are closed ([t - d, t]); the expectations below are for that (the
installed promtool). docs/detection-model.md ("Hysteresis") says what changes with 3.x.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from rulegen import series as S
from rulegen.model import DetectionRuleConfig, from_spec
from rulegen.render import render_rules
from testkit.rule_reference import held
from tests.promtool import assert_promtool_passes

END = 140  # seconds of input; every evaluation from 0 to END is checked
CONSTRAINT = "psi_io_some"


def _steps(*ones: range | int) -> list[int]:
    """0/1 per second over [0, END]: 1 at the given seconds."""
    hot: set[int] = set()
    for part in ones:
        hot.update([part] if isinstance(part, int) else part)
    return [1 if t in hot else 0 for t in range(END + 1)]


# Node -> exceeded per second (holdFor 5s, clearAfter 30s: the shipped defaults).
INPUTS: dict[str, list[int]] = {
    "quiet": _steps(),
    "blip": _steps(10, 60),  # one evaluation, twice
    "short": _steps(range(10, 14)),  # 4 s: less than holdFor
    "sustained": _steps(range(10, 41)),  # 10..40: held from 15, clear from 71
    "flapping": _steps(range(10, 21), range(22, 101, 2)),  # held, then every other second
    "flapping_only": _steps(range(10, 101, 2)),  # never exceeded for holdFor
}


def violated_rule(config: DetectionRuleConfig) -> dict[str, Any]:
    """The generated rule file with only the violated rule (its input, exceeded, is given)."""
    groups = yaml.safe_load(render_rules(config))["groups"]
    (rule,) = [
        r for g in groups for r in g["rules"] if r.get("record") == S.HARD_CONSTRAINT_VIOLATED
    ]
    interval = groups[0]["interval"]
    return {"groups": [{"name": "mco.rules", "interval": interval, "rules": [rule]}]}


def promtool_violated(tmp_path: Path, config: DetectionRuleConfig) -> dict[str, list[int]]:
    """Violated per node and second, as promtool evaluates the generated rule; checked by
    promtool against ``held`` (the run fails on any difference) and returned for the hand
    checks."""
    expected = {
        node: [
            int(v)
            for _, v in held(
                [(float(t), float(v)) for t, v in enumerate(values)],
                config.hysteresis.hold_for,
                config.hysteresis.clear_after,
            )
        ]
        for node, values in INPUTS.items()
    }
    suite = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1s",
        "tests": [
            {
                "interval": "1s",
                "input_series": [
                    {
                        "series": f'{S.HARD_CONSTRAINT_EXCEEDED}{{node="{node}",'
                        f'constraint="{CONSTRAINT}"}}',
                        "values": " ".join(map(str, values)),
                    }
                    for node, values in INPUTS.items()
                ],
                "promql_expr_test": [
                    {
                        "expr": S.HARD_CONSTRAINT_VIOLATED,
                        "eval_time": f"{t}s",
                        "exp_samples": [
                            {
                                "labels": f'{S.HARD_CONSTRAINT_VIOLATED}{{node="{node}",'
                                f'constraint="{CONSTRAINT}"}}',
                                "value": expected[node][t],
                            }
                            for node in INPUTS
                        ],
                    }
                    for t in range(END + 1)
                ],
            }
        ],
    }
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(violated_rule(config), sort_keys=False))
    assert_promtool_passes(tmp_path, suite, "hold.test.yaml")
    return expected


def first(values: list[int], value: int, after: int = 0) -> int:
    return next(t for t in range(after, len(values)) if values[t] == value)


def test_held_rule_agrees_with_the_definition_and_behaves_as_asked(tmp_path):
    config = DetectionRuleConfig.default()
    assert (config.hysteresis.hold_for, config.hysteresis.clear_after) == (5, 30)
    v = promtool_violated(tmp_path, config)
    # A one-evaluation blip, or an excess shorter than holdFor, never filters the node.
    assert not any(v["quiet"]) and not any(v["blip"]) and not any(v["short"])
    # A sustained excess (from 10 s) filters it once it has held for holdFor (5 s) ...
    assert first(v["sustained"], 1) == 15
    # ... and it is admitted again only once exceeded has been 0 for clearAfter (last 1 at 40).
    assert all(v["sustained"][15:71]) and first(v["sustained"], 0, after=15) == 71
    # Flapping after it was held keeps it held, until clearAfter past the last excess (100).
    assert first(v["flapping"], 1) == 15
    assert all(v["flapping"][15:131]) and first(v["flapping"], 0, after=15) == 131
    # Flapping that never held for holdFor never filters.
    assert not any(v["flapping_only"])


def test_other_hold_and_clear_durations_move_the_edges(tmp_path):
    config = from_spec({"hardConstraints": {"holdFor": "2s", "clearAfter": "10s"}})
    v = promtool_violated(tmp_path, config)
    assert not any(v["blip"])
    assert first(v["short"], 1) == 12 and first(v["short"], 0, after=12) == 24
    assert first(v["sustained"], 1) == 12 and first(v["sustained"], 0, after=12) == 51
    # Every other second, 1 s clear at a time: never clear for 10 s, so held to 100 + 10.
    assert first(v["flapping"], 0, after=12) == 111


@pytest.mark.parametrize("hold", ["3s", "20s"])
def test_suite_catches_a_changed_hold(tmp_path, hold):
    """Not vacuous: rules for another holdFor fail the hand expectations of the default."""
    config = from_spec({"hardConstraints": {"holdFor": hold}})
    v = promtool_violated(tmp_path, config)  # agrees with the definition for its own hold
    assert first(v["sustained"], 1) != 15 or any(v["short"])
