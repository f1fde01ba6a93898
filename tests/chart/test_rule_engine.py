"""``monitoring.engine``: the PrometheusRule the chart installs and the one the rulegen
controller applies are the render for that rule engine."""

from __future__ import annotations

import pytest
import yaml

from rulegen.cli import build_parser as rulegen_parser
from rulegen.model import DetectionRuleConfig
from rulegen.render import Engine, render_rules
from tests.chart.helm import merge, render, scenario_values


@pytest.mark.parametrize("engine", ["prometheus", "victoriametrics", None])
def test_the_chart_installs_and_the_controller_applies_the_engines_render(
    engine: Engine | None,
) -> None:
    values = scenario_values("full")
    if engine is not None:
        values = merge(values, {"monitoring": {"engine": engine}})
    rendered = render(values)
    want: Engine = engine or "prometheus"  # the default: kube-prometheus-stack
    groups = yaml.safe_load(render_rules(DetectionRuleConfig.default(), engine=want))["groups"]
    assert rendered.one("PrometheusRule")["spec"]["groups"] == groups
    assert ("[500ms]" in yaml.safe_dump(groups)) == (want == "prometheus")
    (deployment,) = [
        d for d in rendered.of_kind("Deployment") if d["metadata"]["name"].endswith("-rulegen")
    ]
    args = rulegen_parser().parse_args(
        deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    assert args.engine == want


def test_an_unknown_engine_is_refused():
    with pytest.raises(Exception, match="engine"):
        render(merge(scenario_values("full"), {"monitoring": {"engine": "thanos"}}))
