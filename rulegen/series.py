"""Names of the recorded series: the contract between the rules, the reporter and the dashboards.

DESIGN §2. Everything that reads Prometheus imports these constants instead of spelling names.
The per-signal, per-detection and per-constraint names are declared in ``rulegen.catalog``;
the ones here are the fixed series every model has.
"""

from __future__ import annotations

from typing import Final

from mco import selfmetrics
from rulegen.catalog import CATALOG

# Views of the default catalog (rulegen/catalog.py declares each series once), for readers
# that need only names. Code that derives from the model takes a ``Catalog`` instead.
# Smoothed signals, keyed by the DetectionRuleConfig signal key that thresholds them.
SIGNAL_SERIES: Final[dict[str, str]] = {s.key: s.series for s in CATALOG.signals}
# Smoothed series recorded for dashboards and hard constraints, not thresholded as signals.
CONTEXT_SERIES: Final[dict[str, str]] = {c.key: c.series for c in CATALOG.context}

# Detection keys in the DetectionRuleConfig -> the ``detection`` label value.
DETECTIONS: Final[dict[str, str]] = {d.key: d.label for d in CATALOG.detections}
# Hard-constraint keys in the DetectionRuleConfig -> the ``constraint`` label value.
HARD_CONSTRAINTS: Final[dict[str, str]] = {c.key: c.label for c in CATALOG.constraints}

DETECTION_INDEX: Final = "node:mco_detection_index:ratio"  # {detection}
# Per detection, (value - warn) / (critical - warn) of its worst signal (mirrored where lower is
# worse), unbounded: >= 0 is triggered, clamped to [0, 1] it is the index. Recorded so that the
# index and triggered each read one series per detection instead of every signal again.
DETECTION_EXCESS: Final = "node:mco_detection_excess:ratio"  # {detection}
DETECTION_TRIGGERED: Final = "node:mco_detection_triggered:bool"  # {detection}
MEMORY_PRESSURE_FALLBACK: Final = "node:mco_memory_pressure_fallback:bool"
INTERFERENCE_LEVEL: Final = "node:mco_interference_level:ratio"
# {constraint}: 1 while the smoothed signal is beyond the limit, this evaluation (raw).
HARD_CONSTRAINT_EXCEEDED: Final = "node:mco_hard_constraint_exceeded:bool"
# {constraint}: the held one, what filters a node: 1 once exceeded has held for holdFor, 0 again
# once exceeded has been 0 for clearAfter (docs/detection-model.md, "Hysteresis").
HARD_CONSTRAINT_VIOLATED: Final = "node:mco_hard_constraint_violated:bool"
SCHEDULE_SCORE: Final = "node:mco_schedule_score"
# Intermediate series, recorded so that the rules after them read each raw series once per
# evaluation instead of once per rule (see docs/detection-model.md, "Intermediate series").
# Per pod (labels node, pod_uid, qos; see docs/detection-model.md, "Victims, not self-inflicted
# stalls"): each pod's stall per resource and kind (io, memory), and whether it hit its own
# memory or I/O limit in the window (1) or not (0).
POD_PRESSURE: Final = CATALOG.by_key("podPressure").series
POD_MEMORY_SELF_LIMITED: Final = CATALOG.by_key("podMemorySelfLimited").series
POD_IO_SELF_LIMITED: Final = CATALOG.by_key("podIOSelfLimited").series
# Per node: the worst victim's stall (0: per-pod data but no victim stalls); absent where the
# node has no per-pod data, and then the judged PSI series read the node's PSI instead.
VICTIM_PRESSURE: Final[dict[str, str]] = {
    k: CATALOG.by_key(k).series
    for k in ("victimMemorySome", "victimMemoryFull", "victimIOSome", "victimIOFull")
}
# Per node: 1 where the node has no per-pod data, so node PSI (any cgroup's stall, a pod's in
# its own limit included) stands in for the victims' stall; 0 where the victims' stall is used.
POD_PRESSURE_FALLBACK: Final = "node:mco_pod_pressure_fallback:bool"
# Per node, constant 1: the node set (``group by (node)`` of NODE_INFO), which every rule that
# must give a value on every node reads.
NODE_SET: Final = "node:mco_node:info"
# Constant 1 with labels ``generation`` and ``hash``: which DetectionRuleConfig the rules encode,
# so readers know what Prometheus is actually evaluating.
RULE_CONFIG_INFO: Final = "mco:rule_config:info"
# The thresholds in force, one constant series each, so dashboards and queries read the values
# the rules use instead of the defaults they were generated with. Labels: ``bound`` and one of
# ``signal`` (a SIGNAL_LABELS value; bound warn|critical), ``constraint`` (a HARD_CONSTRAINTS
# value; bound limit) or ``setting`` (a THRESHOLD_SETTINGS key; bound limit).
THRESHOLD: Final = "mco:threshold"
# The DetectionRuleConfig settings recorded under THRESHOLD{setting=...}: the alert level of
# MCONodeInterfered, and the two durations (seconds) the pipeline dashboard draws.
THRESHOLD_SETTINGS: Final = ("nodeInterferedLevel", "evaluationInterval", "staleAfter")

# Raw exporter series readers need next to the recorded ones.
KATA_READY: Final = "mco_kata_runtime_ready"
# resctrl LLC occupancy per group (label ``group``: ``/name`` for a CTRL_MON group,
# ``/ctrl/mon_groups/name`` for a MON group) and the groups named after a pod (``pod<uid>``,
# as the kubelet names pod cgroups), the UID captured: the pods ranked by LLC occupancy.
LLC_OCCUPANCY: Final = "mco_llc_occupancy_bytes"
POD_LLC_GROUP: Final = ".*/pod([^/]+)"
POD_MEMORY_USAGE: Final = "mco_pod_memory_usage_bytes"
POD_IO_BYTES: Final = "mco_pod_io_bytes_total"
# kube-state-metrics' pod info (labels uid, namespace, pod), relabelled to join on ``pod_uid``:
# ``X * on (pod_uid) group_left (namespace, pod) POD_NAMES`` names the pods of X (the reporter's
# victims and aggressors, the node dashboard's per-pod panels).
POD_INFO: Final = "kube_pod_info"
POD_NAMES: Final = (
    f'label_replace(max by (uid, namespace, pod) ({POD_INFO}), "pod_uid", "$1", "uid", "(.+)")'
)
# The same with each pod's controller (``created_by_kind``, ``created_by_name``; "<none>" for a
# pod without one): what the reporter keys workload profiles by (``mco.workload``).
POD_OWNERS: Final = (
    f"label_replace(max by (uid, namespace, pod, created_by_kind, created_by_name) ({POD_INFO}),"
    ' "pod_uid", "$1", "uid", "(.+)")'
)

# Per-signal index, labels ``detection`` and ``signal`` (values of SIGNAL_LABELS): which signal
# drives a detection. Recorded only where the signal counts for its detection on that node
# (the memory-pressure fallback signals only where PSI is not available).
SIGNAL_INDEX: Final = "node:mco_signal_index:ratio"  # {detection, signal}
SIGNAL_LABELS: Final[dict[str, str]] = {s.key: s.label for s in CATALOG.signals}
# The node set: every node whose exporter is up has this series (label ``node`` from the
# scrape, ``nodename`` from the exporter); the rules use it so every ``:bool`` series exists
# on every node.
NODE_INFO: Final = selfmetrics.EXPORTER_NODE_INFO
# Gauge the reporter exports: Unix time of its last successful sync (alert MCOReportStale).
REPORTER_LAST_SYNC: Final = selfmetrics.REPORTER_LAST_SYNC
