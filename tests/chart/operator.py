"""What the Prometheus Operator makes of the chart's ServiceMonitors, for real Prometheus runs.

The operator turns each ServiceMonitor endpoint into a scrape config with Kubernetes endpoint
discovery; before the endpoint's own relabelings it maps ``jobLabel`` (a label of the Service)
to ``job``. Debian's Prometheus has no Kubernetes discovery, so here a static target carries
the ``__meta_kubernetes_*`` labels discovery would have set, and the same relabelings run on
them. That exercises the chart's relabelings in a real Prometheus.
"""

from __future__ import annotations

import re
from typing import Any


def _snake(key: str) -> str:
    return re.sub(r"[A-Z]", lambda m: f"_{m.group(0).lower()}", key)


def _relabel(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{_snake(k): v for k, v in r.items()} for r in rules]


def _meta_label(label: str) -> str:
    """A Service label as Kubernetes discovery names it (``mco.io/job`` -> ..._mco_io_job)."""
    return "__meta_kubernetes_service_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label)


def sharding_relabelings(shard: int, shards: int) -> list[dict[str, Any]]:
    """What the operator appends to every scrape config of a Prometheus with ``spec.shards``
    (pkg/prometheus/promcfg.go, ``appendShardingRelabelingWithLabel``), with ``$(SHARD)`` set as
    its config reloader sets it in shard ``shard``'s pods: a target is kept by the shard its
    ``__tmp_hash`` (default ``__address__``) hashes to, or by every shard when a relabeling set
    ``__tmp_disable_sharding``."""
    return [
        {
            "source_labels": ["__address__", "__tmp_hash"],
            "target_label": "__tmp_hash",
            "regex": "(.+);",
            "replacement": "$1",
            "action": "replace",
        },
        {
            "source_labels": ["__tmp_hash"],
            "target_label": "__tmp_hash",
            "modulus": shards,
            "action": "hashmod",
        },
        {
            "source_labels": ["__tmp_hash", "__tmp_disable_sharding"],
            "regex": f"{shard};|.+;.+",
            "action": "keep",
        },
    ]


def scrape_config(
    monitor: dict[str, Any],
    service_labels: dict[str, str],
    targets: dict[str, str],
    *,
    endpoint: int = 0,
    shard: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """One scrape config for ``monitor``'s endpoint; ``targets`` maps address -> pod node name;
    ``shard`` (number, shards) as the operator renders it for one shard of a sharded Prometheus."""
    spec = monitor["spec"]
    ep = spec["endpoints"][endpoint]
    job_relabel = []
    if "jobLabel" in spec:
        job_relabel.append(
            {"source_labels": [_meta_label(spec["jobLabel"])], "target_label": "job"}
        )
    meta = {_meta_label(k): v for k, v in service_labels.items()}
    config: dict[str, Any] = {
        "job_name": f"serviceMonitor/{monitor['metadata']['name']}/{endpoint}",
        "metrics_path": ep.get("path", "/metrics"),
        "scheme": ep.get("scheme", "http"),
        "static_configs": [
            {"targets": [address], "labels": {**meta, "__meta_kubernetes_pod_node_name": node}}
            for address, node in targets.items()
        ],
        "relabel_configs": job_relabel + _relabel(ep.get("relabelings", [])),
    }
    if shard is not None:
        config["relabel_configs"] += sharding_relabelings(*shard)
    if ep.get("metricRelabelings"):
        config["metric_relabel_configs"] = _relabel(ep["metricRelabelings"])
    if "interval" in ep:
        config["scrape_interval"] = ep["interval"]
    if "scrapeTimeout" in ep:
        config["scrape_timeout"] = ep["scrapeTimeout"]
    return config
