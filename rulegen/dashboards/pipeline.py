"""Pipeline health: is every stage from the node to the scheduler working, and how fast.

Exporter (collectors, scrape time), rules (evaluation time, the config in force), reporter
(cycle, staleness) and extender (latency, verdicts). The components' own metric names come
from ``mco.selfmetrics``, which the components define their metrics with; tests/dashboards
checks each query against the running components.
"""

from __future__ import annotations

from typing import Final

import yaml

from mco.selfmetrics import (
    EXPORTER_COLLECTOR_DURATION,
    EXPORTER_COLLECTOR_SUCCESS,
    EXTENDER_NEWEST_SAMPLE_AGE,
    EXTENDER_OLDEST_SAMPLE_AGE,
    EXTENDER_REPORT_NODES,
    EXTENDER_REQUEST_DURATION,
    EXTENDER_REQUESTS,
    EXTENDER_VERDICTS,
    REPORTER_API_WRITE_BYTES,
    REPORTER_API_WRITES,
    REPORTER_CYCLE_DURATION,
    REPORTER_ERRORS,
    REPORTER_LAGGING_NODES,
    REPORTER_LAST_SYNC,
    REPORTER_LEADER,
    REPORTER_NODES,
    REPORTER_STALE_NODES,
    RULEGEN_APPLIED_GENERATION,
    RULEGEN_CONFIG_ACCEPTED,
    RULEGEN_LEADER,
)
from rulegen import series
from rulegen.dashboards.panels import (
    NODE_MATCH,
    RATE_INTERVAL,
    PanelBuilder,
    Query,
    Step,
    new_dashboard,
    render,
    setting_step,
    stat_panel,
    table_panel,
    timeseries,
)
from rulegen.model import DetectionRuleConfig
from rulegen.render import render_rules

UID: Final = "mco-pipeline-health"

OK_FAILING: Final = ((0, "off / failing", "orange"), (1, "ok", "green"))


def rule_group_matcher() -> str:
    """``rule_group`` label matcher for MCO's groups, named from the rendered rules."""
    rules = yaml.safe_load(render_rules(DetectionRuleConfig.default()))
    names = [g["name"].replace(".", "[.]") for g in rules["groups"]]
    return f'rule_group=~".*;({"|".join(names)})"'


def build(config: DetectionRuleConfig) -> str:
    exporter = config.alerts.exporter_selector
    interval = config.evaluation_interval
    stale_after = config.report.stale_after
    interval_line = [Step(None, "green"), setting_step("evaluationInterval", interval, "red")]
    stale_line = [Step(None, "green"), setting_step("staleAfter", stale_after, "red")]
    groups = rule_group_matcher()
    board = new_dashboard(
        UID,
        "MCO / Pipeline health",
        "Every stage from the node to the scheduler: exporter collectors and scrape time, rule "
        "evaluation, the reporter's cycle and staleness, the extender's latency and verdicts.",
        multi_node=True,
    )
    panels: list[PanelBuilder] = [
        # --- exporter
        stat_panel(
            "Exporters up",
            Query(f"sum(up{{{exporter}, {NODE_MATCH}}})"),
            steps=[Step(None, "blue")],
        ),
        stat_panel(
            "Exporters down",
            Query(f"count(up{{{exporter}, {NODE_MATCH}}} == 0) or vector(0)"),
            steps=[Step(None, "green"), Step(1, "red")],
        ),
        stat_panel(
            "Report age",
            Query(f"time() - max({REPORTER_LAST_SYNC})"),
            unit="s",
            description="Seconds since the reporter's last successful sync; beyond "
            f"report.staleAfter in force (default {stale_after} s) the extender treats the data "
            "as stale.",
            steps=stale_line,
        ),
        stat_panel(
            "Extender nodes stale",
            Query(f'max({EXTENDER_REPORT_NODES}{{state="stale"}})'),
            description="Nodes whose report entry is older than staleAfter in an extender's "
            "view: they get the neutral score.",
            steps=[Step(None, "green"), Step(1, "orange")],
        ),
        stat_panel(
            "DetectionRuleConfig accepted",
            Query(f"min({RULEGEN_CONFIG_ACCEPTED} and on (job, instance) ({RULEGEN_LEADER} == 1))"),
            description="0 when the rulegen controller rejected the last change (the last "
            "good rules stay in force). Only the leading replica validates.",
            mappings=((0, "rejected", "red"), (1, "accepted", "green")),
            steps=[Step(None, "red"), Step(1, "green")],
            width=8,
        ),
        timeseries(
            "Exporter scrape duration",
            [Query(f"scrape_duration_seconds{{{exporter}, {NODE_MATCH}}}", "{{node}}")],
            unit="s",
            description="The line is the rule evaluation interval in force (default "
            f"{interval} s): slower scrapes leave gaps in the smoothing window.",
            steps=interval_line,
            minimum=0,
        ),
        timeseries(
            "Samples per scrape",
            [Query(f"scrape_samples_scraped{{{exporter}, {NODE_MATCH}}}", "{{node}}")],
            minimum=0,
        ),
        timeseries(
            "Collectors off or failing",
            [
                Query(
                    f"sum by (collector) (1 - {EXPORTER_COLLECTOR_SUCCESS}{{{NODE_MATCH}}})",
                    "{{collector}}",
                )
            ],
            description="Nodes on which each collector is off (its source is missing: no "
            "PMU, no resctrl, no eBPF …) or failed on the last scrape.",
            minimum=0,
        ),
        timeseries(
            "Collector duration (slowest node)",
            [
                Query(
                    f"max by (collector) ({EXPORTER_COLLECTOR_DURATION}{{{NODE_MATCH}}})",
                    "{{collector}}",
                )
            ],
            unit="s",
            minimum=0,
        ),
        table_panel(
            "Collector status per node",
            Query(f"{EXPORTER_COLLECTOR_SUCCESS}{{{NODE_MATCH}}}", instant=True),
            mappings=OK_FAILING,
            width=24,
        ),
        # --- rules
        timeseries(
            "Rule group evaluation time",
            [Query(f"prometheus_rule_group_last_duration_seconds{{{groups}}}", "{{rule_group}}")],
            unit="s",
            description="The line is the evaluation interval in force (default "
            f"{interval} s); needs Prometheus to scrape itself (kube-prometheus-stack does).",
            steps=interval_line,
            minimum=0,
        ),
        timeseries(
            "Missed rule evaluations",
            [
                Query(
                    "sum by (rule_group) (increase(prometheus_rule_group_iterations_missed_total"
                    f"{{{groups}}}[{RATE_INTERVAL}]))",
                    "{{rule_group}}",
                )
            ],
            minimum=0,
        ),
        table_panel(
            "Detection rules in force",
            Query(series.RULE_CONFIG_INFO, instant=True),
            description="generation: metadata.generation of the DetectionRuleConfig the loaded "
            "rules encode (0: the built-in default); hash: its canonical spec.",
            width=24,
            height=5,
        ),
        # --- reporter
        timeseries(
            "Reporter cycle duration",
            [
                Query(
                    "histogram_quantile(0.5, sum by (le) "
                    f"(rate({REPORTER_CYCLE_DURATION}_bucket[{RATE_INTERVAL}])))",
                    "p50",
                ),
                Query(
                    "histogram_quantile(0.99, sum by (le) "
                    f"(rate({REPORTER_CYCLE_DURATION}_bucket[{RATE_INTERVAL}])))",
                    "p99",
                ),
            ],
            unit="s",
            description="One cycle: the PromQL query, building the entries, writing the report. "
            "Longer than the reporter's --interval means cycles are skipped.",
            minimum=0,
        ),
        timeseries(
            "Report staleness",
            [Query(f"time() - max({REPORTER_LAST_SYNC})", "since last sync")],
            unit="s",
            description=f"Seconds since the last successful sync; the line is staleAfter "
            f"in force (default {stale_after} s).",
            steps=stale_line,
            minimum=0,
        ),
        timeseries(
            "Nodes in the report",
            [
                Query(f"max({REPORTER_NODES})", "reported"),
                Query(f"max({REPORTER_STALE_NODES})", "stale"),
                Query(f"max({REPORTER_LAGGING_NODES})", "lagging"),
            ],
            description="Stale: older than staleAfter for a reader now. Lagging: no fresh sample "
            "at the last sync (removed after staleAfter).",
            minimum=0,
        ),
        timeseries(
            "Reporter errors and API writes",
            [
                Query(
                    f"sum by (kind) (rate({REPORTER_ERRORS}[{RATE_INTERVAL}]))",
                    "error {{kind}}",
                ),
                Query(
                    f"sum by (verb) (rate({REPORTER_API_WRITES}[{RATE_INTERVAL}]))",
                    "write {{verb}}",
                ),
            ],
            unit="ops",
            description="Writes grow with the nodes that changed, not with the fleet.",
            minimum=0,
        ),
        stat_panel(
            "Reporter leaders",
            Query(f"sum({REPORTER_LEADER})"),
            description="Replicas holding the Lease: exactly 1 when healthy.",
            steps=[Step(None, "red"), Step(1, "green"), Step(2, "red")],
            width=6,
        ),
        stat_panel(
            "API write rate",
            Query(f"sum(rate({REPORTER_API_WRITE_BYTES}[{RATE_INTERVAL}]))"),
            unit="Bps",
            steps=[Step(None, "blue")],
            width=6,
        ),
        stat_panel(
            "Rules generation applied",
            Query(f"max({RULEGEN_APPLIED_GENERATION})"),
            description="metadata.generation of the DetectionRuleConfig whose PrometheusRule the "
            "rulegen controller applied (0: built-in defaults).",
            steps=[Step(None, "blue")],
            width=6,
        ),
        stat_panel(
            "Extender replicas ready",
            Query('sum(up{job="mco-extender"})'),
            steps=[Step(None, "red"), Step(1, "green")],
            width=6,
        ),
        # --- extender
        timeseries(
            "Extender latency p99 by route",
            [
                Query(
                    "histogram_quantile(0.99, sum by (route, le) "
                    f"(rate({EXTENDER_REQUEST_DURATION}_bucket[{RATE_INTERVAL}])))",
                    "{{route}}",
                )
            ],
            unit="s",
            description="Volcano calls the predicate once per (task, node) pair with a 1 s "
            "timeout by default.",
            minimum=0,
        ),
        timeseries(
            "Extender requests by route and code",
            [
                Query(
                    f"sum by (route, code) (rate({EXTENDER_REQUESTS}[{RATE_INTERVAL}]))",
                    "{{route}} {{code}}",
                )
            ],
            unit="reqps",
            minimum=0,
        ),
        timeseries(
            "Extender verdicts by reason",
            [
                Query(
                    f"sum by (verdict, reason) (rate({EXTENDER_VERDICTS}[{RATE_INTERVAL}]))",
                    "{{verdict}} · {{reason}}",
                )
            ],
            unit="ops",
            minimum=0,
        ),
        timeseries(
            "Extender report sample age",
            [
                Query(f"max({EXTENDER_NEWEST_SAMPLE_AGE})", "newest"),
                Query(f"max({EXTENDER_OLDEST_SAMPLE_AGE})", "oldest"),
            ],
            unit="s",
            description=f"Beyond staleAfter in force (default {stale_after} s) a node's entry "
            "is stale.",
            steps=stale_line,
            minimum=0,
        ),
    ]
    for panel in panels:
        board = board.with_panel(panel)
    return render(board)
