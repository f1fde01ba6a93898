"""Names of the recorded series: the contract between the rules, the reporter and the dashboards.

DESIGN §2. Everything that reads Prometheus imports these constants instead of spelling names.
"""

from __future__ import annotations

from typing import Final

from mco import selfmetrics

# Smoothed signals, keyed by the DetectionRuleConfig signal key that thresholds them.
SIGNAL_SERIES: Final[dict[str, str]] = {
    "llcMissRatio": "node:mco_llc_miss_ratio:smoothed",
    "blockIOLatencyP95Seconds": "node:mco_block_io_latency_p95_seconds:smoothed",
    "blockIOLatencyP99Seconds": "node:mco_block_io_latency_p99_seconds:smoothed",
    "psiIOSome": "node:mco_psi_io_some_ratio:smoothed",
    "psiMemorySome": "node:mco_psi_memory_some_ratio:smoothed",
    "memoryAvailableRatio": "node:mco_memory_available_ratio:smoothed",
    "pageScanRate": "node:mco_pgscan_rate:smoothed",
    "cpuStealRatio": "node:mco_cpu_steal_ratio:smoothed",
    "runqueueWaitRatio": "node:mco_runqueue_wait_ratio:smoothed",
}
# Smoothed series recorded for dashboards and hard constraints, not thresholded as signals.
CONTEXT_SERIES: Final[dict[str, str]] = {
    "llcOccupancyBytes": "node:mco_llc_occupancy_bytes:smoothed",
    "psiCPUSome": "node:mco_psi_cpu_some_ratio:smoothed",
    "psiIOFull": "node:mco_psi_io_full_ratio:smoothed",
    "psiMemoryFull": "node:mco_psi_memory_full_ratio:smoothed",
}

# Detection keys in the DetectionRuleConfig -> the ``detection`` label value.
DETECTIONS: Final[dict[str, str]] = {
    "cachePollution": "cache_pollution",
    "ioCongestion": "io_congestion",
    "memoryPressure": "memory_pressure",
    "cpuContention": "cpu_contention",
}
HARD_CONSTRAINTS: Final[dict[str, str]] = {
    "psiMemoryFullMax": "psi_memory_full",
    "psiIOSomeMax": "psi_io_some",
}

DETECTION_INDEX: Final = "node:mco_detection_index:ratio"  # {detection}
DETECTION_TRIGGERED: Final = "node:mco_detection_triggered:bool"  # {detection}
MEMORY_PRESSURE_FALLBACK: Final = "node:mco_memory_pressure_fallback:bool"
INTERFERENCE_LEVEL: Final = "node:mco_interference_level:ratio"
HARD_CONSTRAINT_VIOLATED: Final = "node:mco_hard_constraint_violated:bool"  # {constraint}
SCHEDULE_SCORE: Final = "node:mco_schedule_score"
# Intermediate series, recorded so that the rules after them read each raw series once per
# evaluation instead of once per rule (see docs/detection-model.md, "Intermediate series").
# Per (node, device, le): the eBPF latency buckets' rate over the window, summed over
# operations; both latency quantiles are computed from it.
BLOCK_IO_LATENCY_BUCKET_RATE: Final = "node_device:mco_block_io_latency_seconds_bucket:rate"
# Per node, constant 1: the node set (``group by (node)`` of NODE_INFO), which every rule that
# must give a value on every node reads.
NODE_SET: Final = "node:mco_node:info"
# Constant 1 with labels ``generation`` and ``hash``: which DetectionRuleConfig the rules encode,
# so readers know what Prometheus is actually evaluating.
RULE_CONFIG_INFO: Final = "mco:rule_config:info"

# Raw exporter series readers need next to the recorded ones.
KATA_READY: Final = "mco_kata_runtime_ready"

# Per-signal index, labels ``detection`` and ``signal`` (values of SIGNAL_LABELS): which signal
# drives a detection. Recorded only where the signal counts for its detection on that node
# (the memory-pressure fallback signals only where PSI is not available).
SIGNAL_INDEX: Final = "node:mco_signal_index:ratio"  # {detection, signal}
SIGNAL_LABELS: Final[dict[str, str]] = {
    "llcMissRatio": "llc_miss_ratio",
    "blockIOLatencyP95Seconds": "block_io_latency_p95_seconds",
    "blockIOLatencyP99Seconds": "block_io_latency_p99_seconds",
    "psiIOSome": "psi_io_some",
    "psiMemorySome": "psi_memory_some",
    "memoryAvailableRatio": "memory_available_ratio",
    "pageScanRate": "pgscan_rate",
    "cpuStealRatio": "cpu_steal_ratio",
    "runqueueWaitRatio": "runqueue_wait_ratio",
}
# The node set: every node whose exporter is up has this series (label ``node`` from the
# scrape, ``nodename`` from the exporter); the rules use it so every ``:bool`` series exists
# on every node.
NODE_INFO: Final = selfmetrics.EXPORTER_NODE_INFO
# Gauge the reporter exports: Unix time of its last successful sync (alert MCOReportStale).
REPORTER_LAST_SYNC: Final = selfmetrics.REPORTER_LAST_SYNC
