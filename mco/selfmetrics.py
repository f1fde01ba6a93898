"""Names of every MCO process's own metrics (self-metrics), declared once.

The components define their metrics with these names and the dashboards and alerts query them,
so a rename is one change here instead of a silent empty panel. A leaf module: constants only,
no imports from the components. Counters are named as scraped (``_total``; prometheus_client
strips and re-adds the suffix), histograms by their base name (``_bucket`` is added by queries).
Recorded series and the exporter's data metrics are not here: they belong to ``rulegen.series``
and the collectors.
"""

from __future__ import annotations

from typing import Final

# --- mco-exporter (exporter/scrape.py)
EXPORTER_COLLECTOR_SUCCESS: Final = "mco_exporter_collector_success"
EXPORTER_COLLECTOR_DURATION: Final = "mco_exporter_collector_duration_seconds"
# Always 1, labels nodename and kernel: the rules take the node set from it.
EXPORTER_NODE_INFO: Final = "mco_node_info"

# --- mco-reporter (reporter/metrics.py)
REPORTER_CYCLE_DURATION: Final = "mco_reporter_cycle_duration_seconds"
REPORTER_CYCLE_CPU: Final = "mco_reporter_cycle_cpu_seconds_total"
REPORTER_QUERIES: Final = "mco_reporter_queries_total"
REPORTER_ANSWER_BYTES: Final = "mco_reporter_answer_bytes_total"
REPORTER_NODES: Final = "mco_reporter_nodes"
REPORTER_STALE_NODES: Final = "mco_reporter_stale_nodes"
REPORTER_LAGGING_NODES: Final = "mco_reporter_lagging_nodes"
REPORTER_CHANGED_NODES: Final = "mco_reporter_changed_nodes_total"
REPORTER_API_WRITES: Final = "mco_reporter_api_writes_total"
REPORTER_ASYNCIO_TASKS: Final = "mco_reporter_asyncio_tasks"  # mco.asynciotasks
REPORTER_API_WRITE_BYTES: Final = "mco_reporter_api_write_bytes_total"
REPORTER_FILE_WRITE_BYTES: Final = "mco_reporter_file_write_bytes_total"
REPORTER_ERRORS: Final = "mco_reporter_errors_total"
REPORTER_LEADER: Final = "mco_reporter_leader"
# Unix time of the last successful sync: the MCOReportStale and MCOReporterAbsent alerts.
REPORTER_LAST_SYNC: Final = "mco_reporter_last_sync_timestamp_seconds"
REPORTER_LAYOUT: Final = "mco_reporter_layout"
REPORTER_LARGEST_OBJECT_BYTES: Final = "mco_reporter_largest_object_bytes"
REPORTER_OBJECT_OVER_LIMIT: Final = "mco_reporter_object_over_limit"
REPORTER_RULE_CONFIG_MISMATCH: Final = "mco_reporter_rule_config_mismatch"
# Per PromQL source (a shard), labelled with its URL without credentials.
REPORTER_SOURCE_UP: Final = "mco_reporter_source_up"
REPORTER_SOURCE_NODES: Final = "mco_reporter_source_nodes"
# The taint mode (--taint-nodes): MCO's NoSchedule taint on nodes with a held hard constraint.
REPORTER_TAINTS_ADDED: Final = "mco_reporter_taints_added_total"
REPORTER_TAINTS_REMOVED: Final = "mco_reporter_taints_removed_total"
REPORTER_TAINT_ERRORS: Final = "mco_reporter_taint_errors_total"
REPORTER_TAINTED_NODES: Final = "mco_reporter_tainted_nodes"
REPORTER_TAINT_PENDING: Final = "mco_reporter_taint_pending_nodes"
REPORTER_TAINT_HELD_BACK: Final = "mco_reporter_taint_held_back_nodes"
# The tier-label mode (--tier-label-nodes): the label mco.io/interference-tier on every node.
REPORTER_TIER_CHANGES: Final = "mco_reporter_tier_label_changes_total"
REPORTER_TIER_ERRORS: Final = "mco_reporter_tier_label_errors_total"
REPORTER_TIER_NODES: Final = "mco_reporter_tier_labelled_nodes"
REPORTER_TIER_PENDING: Final = "mco_reporter_tier_label_pending_nodes"

# --- mco-extender (extender/metrics.py)
EXTENDER_REPORT_LOADED: Final = "mco_extender_report_loaded"
EXTENDER_REPORT_NODES: Final = "mco_extender_report_nodes"
EXTENDER_NEWEST_SAMPLE_AGE: Final = "mco_extender_report_newest_sample_age_seconds"
EXTENDER_OLDEST_SAMPLE_AGE: Final = "mco_extender_report_oldest_sample_age_seconds"
EXTENDER_LAST_CHANGE_AGE: Final = "mco_extender_report_last_change_age_seconds"
EXTENDER_HEARTBEAT_AGE: Final = "mco_extender_report_heartbeat_age_seconds"
EXTENDER_REPORT_OBJECTS: Final = "mco_extender_report_objects"
EXTENDER_REQUEST_DURATION: Final = "mco_extender_request_duration_seconds"
EXTENDER_REQUESTS: Final = "mco_extender_requests_total"
EXTENDER_VERDICTS: Final = "mco_extender_verdicts_total"
EXTENDER_REPORT_LOADS: Final = "mco_extender_report_loads_total"
EXTENDER_WATCH_RESTARTS: Final = "mco_extender_watch_restarts_total"
EXTENDER_PLACEMENTS: Final = "mco_extender_placements_total"
EXTENDER_RESERVATION_PODS: Final = "mco_extender_reservation_pods"
EXTENDER_RESERVATION_SOURCE_UP: Final = "mco_extender_reservation_source_up"
EXTENDER_ASYNCIO_TASKS: Final = "mco_extender_asyncio_tasks"  # of the worker that answers

# --- mco-rulegen controller (rulegen/controller.py)
# 0 when the last DetectionRuleConfig change was rejected: MCODetectionRuleConfigRejected.
RULEGEN_CONFIG_ACCEPTED: Final = "mco_rulegen_config_accepted"
RULEGEN_LEADER: Final = "mco_rulegen_leader"  # 1 on the replica that holds the Lease
RULEGEN_OBSERVED_GENERATION: Final = "mco_rulegen_observed_generation"
RULEGEN_APPLIED_GENERATION: Final = "mco_rulegen_applied_generation"
RULEGEN_APPLIES: Final = "mco_rulegen_applies_total"
RULEGEN_REJECTIONS: Final = "mco_rulegen_rejections_total"
RULEGEN_GUARD_CHECKS: Final = "mco_rulegen_guard_checks_total"  # {result}
RULEGEN_ERRORS: Final = "mco_rulegen_errors_total"
RULEGEN_LAST_APPLY: Final = "mco_rulegen_last_apply_timestamp_seconds"
RULEGEN_API_REACHABLE: Final = "mco_rulegen_api_reachable"
RULEGEN_ASYNCIO_TASKS: Final = "mco_rulegen_asyncio_tasks"
# Bounds the accepted config's latency thresholds need that the exporters do not export.
RULEGEN_LATENCY_BUCKETS_MISSING: Final = "mco_rulegen_latency_buckets_missing"
