"""Names of the recorded series: the contract between the rules, the reporter and the dashboards.

DESIGN §2. Everything that reads Prometheus imports these constants instead of spelling names.
"""

from __future__ import annotations

from typing import Final

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
# Constant 1 with labels ``generation`` and ``hash``: which DetectionRuleConfig the rules encode,
# so readers know what Prometheus is actually evaluating.
RULE_CONFIG_INFO: Final = "mco:rule_config:info"

# Raw exporter series readers need next to the recorded ones.
KATA_READY: Final = "mco_kata_runtime_ready"
