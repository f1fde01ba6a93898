"""The NodeInterferenceReport CRD, generated from the msgspec structs of ``reporter.schema``.

msgspec's JSON Schema is turned into a Kubernetes *structural* schema: references inlined,
optional fields typed (never ``nullable``: the reporter removes a field rather than writing
null), maps as ``additionalProperties``, no defaults (the API server would otherwise add fields
the reporter did not write, and its diff would never settle). Bounds and descriptions are added
here. ``tests/reporter`` validates every object the reporter writes against this schema.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec
import yaml

from reporter.schema import GROUP, KIND, PLURAL, VERSION, NodeInterferenceReport

CRD_PATH: Final = "charts/mco/crds/mco.io_nodeinterferencereports.yaml"
CRD_NAME: Final = f"{PLURAL}.{GROUP}"

# Descriptions by field name (JSON spelling), where the name alone does not say enough.
_HELP: Final[dict[str, str]] = {
    "status": "Written by mco-reporter only.",
    "nodes": "Node name -> its interference entry.",
    "sampleTime": "Prometheus time of the newest sample behind this entry (RFC 3339).",
    "schedulable": "False while a hard constraint is violated.",
    "fallback": "Memory pressure judged without PSI (MemAvailable and page scanning).",
    "kataReady": "A Kata runtime is installed and /dev/kvm usable on the node.",
    "level": "Interference level, 0 (quiet) to 1 (interfered): weighted mean of the "
    "detection indices. Absent when no detection had data.",
    "score": "Schedule score, 100 x (1 - level).",
    "reasons": "Machine-readable reasons: triggered:<detection>, violated:<constraint>, "
    "fallback:memory_pressure, fallback:pod_pressure.",
    "podFallback": "Memory and I/O judged from node PSI: the node has no per-pod pressure "
    "series (a pod stalling in its own limit counts there).",
    "victims": "Up to 3 pods stalling (PSI some at or above the signal's warn) without hitting "
    "a memory or I/O limit of their own, worst first (absent in --compact reports).",
    "aggressors": "Up to 3 pods per resource with a victim: memory by usage, io by bytes/s, "
    "largest first (absent in --compact reports).",
    "podUid": "The pod's UID.",
    "resource": "What the pod is ranked by: memory or io.",
    "value": "Victims: share of time stalled (0-1); aggressors: memory bytes or I/O bytes/s.",
    "qos": "The pod's QoS class from its cgroup: guaranteed, burstable or besteffort.",
    "namespace": "From kube_pod_info; absent when kube-state-metrics has no such pod.",
    "name": "The pod's name, from kube_pod_info (absent like namespace).",
    "detections": "Detection name -> its index (0-1) and whether a signal reached warn.",
    "signals": "Snapshot of the smoothed signals (absent in --compact reports).",
    "violations": "Hard constraints the node breaks, with the value and the limit.",
    "missing": "Values absent (or not finite) at the source for this node.",
    "live": "True: re-checked at every sync, so the values hold up to the heartbeat "
    "(status.lastSyncTime of the object named cluster); false: they hold at sampleTime only.",
    "lastSyncTime": "The heartbeat: last successful sync with the PromQL source.",
    "ruleConfigGeneration": "Generation of the DetectionRuleConfig the source's rules encode.",
    "conditions": "SourceReachable and Synced.",
    "nodeCount": "Nodes in the whole report (on the object named cluster).",
    "summary": "At-a-glance figures (the printer columns): the whole report on the object "
    "named cluster, in both layouts; the one node on a per-node object.",
    "status.summary.nodes": "Nodes this summary covers.",
    "config": "What readers follow from the accepted DetectionRuleConfig (on the object named "
    "cluster): its report settings and policies. A rejected DetectionRuleConfig never gets here.",
    "status.config.generation": "metadata.generation of the accepted DetectionRuleConfig "
    "(absent when the reporter reads a file or the built-in defaults).",
    "status.config.staleAfter": "Data older than this is stale (spec.report.staleAfter).",
    "status.config.neutralScore": "Score of a node without fresh data (spec.report.neutralScore).",
    "status.config.policies": "spec.policies: a pod gets the first policy whose podSelector "
    "matches its labels.",
    "status.config.policies[].maxLevel": "Nodes whose level plus reservation is above this are "
    "filtered for these pods; absent: no limit.",
    "status.config.detections": "Each detection's weight and its signals' warn and critical "
    "in force, by detection label; signals by report key (fallback: judged without PSI).",
    "status.config.detections[].signals": "Each primary signal's warn and critical, by report key.",
    "status.config.detections[].fallback": "Signals that judge the detection while PSI is "
    "unavailable, by report key.",
    "status.config.hardConstraints": "Each hard constraint's limit in force and the report "
    "signal it limits, by constraint label.",
    "unschedulable": "Nodes with schedulable=false.",
    "maxLevel": "Highest level among the nodes (absent when none has a level).",
    "minScore": "Lowest score among the nodes (absent when none has a score).",
    "workload": "namespace/Kind/name of the pod's controller (a ReplicaSet's Deployment, a "
    "Job's CronJob), from kube_pod_info's created_by_kind and created_by_name; a pod without "
    "one: its name less the generated suffix. Workload profiles are kept under it.",
    "profiles": "Learned workload interference profiles (on the object named cluster): per "
    "workload and resource, how much it pollutes and how much it suffers, decayed, bounded by "
    "--profile-max-workloads, written every --profile-publish-interval.",
    "observations": "Decayed number of samples behind the profile: its confidence.",
    "lastSeen": "The last cycle the workload was named as a victim or an aggressor.",
    "resources": "llc, io, memory -> what the workload does to the resource and suffers from it.",
    "aggressor": "Intensity (0-1): decayed mean of its share of the usage named on nodes with "
    "victims.",
    "victim": "Sensitivity (0-1): decayed mean of its stall share where it was a victim.",
    "aggressorCount": "Decayed number of aggressor samples.",
    "victimCount": "Decayed number of victim samples.",
    "stale": "Nodes a reader judged stale (older than staleAfter) at the last write; on the "
    "object named cluster only.",
}
_COUNTS: Final = frozenset({"ruleConfigGeneration", "nodeCount", "nodes", "unschedulable", "stale"})
_TIMES: Final = frozenset({"sampleTime", "lastSyncTime", "lastTransitionTime", "lastSeen"})
BOUNDS: Final[dict[str, tuple[float, float]]] = {  # also what entries.py writes
    "level": (0, 1),
    "score": (0, 100),
    "index": (0, 1),
    "maxLevel": (0, 1),
    "minScore": (0, 100),
    "aggressor": (0, 1),
    "victim": (0, 1),
}


def _inline(schema: Any, defs: dict[str, Any]) -> Any:
    if isinstance(schema, list):
        return [_inline(s, defs) for s in schema]
    if not isinstance(schema, dict):
        return schema
    if "$ref" in schema:
        return _inline(defs[schema["$ref"].rsplit("/", 1)[1]], defs)
    if "anyOf" in schema:
        kinds = [s for s in schema["anyOf"] if s.get("type") != "null"]
        if len(kinds) != 1:
            raise ValueError(f"cannot express {schema} structurally")
        merged = {k: v for k, v in schema.items() if k != "anyOf"}
        return _inline({**kinds[0], **merged}, defs)
    return {k: _inline(v, defs) for k, v in schema.items()}


def _structural(schema: dict[str, Any], path: str = "") -> dict[str, Any]:
    """Strip what a structural schema must not hold, add bounds and descriptions."""
    name = path.rpartition(".")[2]
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("title", "description", "default", "$defs", "propertyNames"):
            continue  # propertyNames: not allowed in a structural schema
        if key == "properties":
            out[key] = {k: _structural(v, f"{path}.{k}" if path else k) for k, v in value.items()}
        elif key in ("additionalProperties", "items") and isinstance(value, dict):
            out[key] = _structural(value, f"{path}[]")
        else:
            out[key] = value
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if out.get("required") == []:
        del out["required"]
    if out.get("type") == "integer" and name in _COUNTS:
        out["minimum"] = 0
    if name in _TIMES:
        out["format"] = "date-time"
    if name in BOUNDS and not path.startswith("status.config."):
        out["minimum"], out["maximum"] = BOUNDS[name]
    for bound in ("minimum", "maximum"):  # msgspec writes 100 or 100.0 depending on the Meta
        if isinstance(out.get(bound), float) and out[bound].is_integer():
            out[bound] = int(out[bound])
    if path in _HELP:
        out["description"] = _HELP[path]
    elif name in _HELP and (name != "status" or path == "status"):
        out["description"] = _HELP[name]
    if out.get("type") == "object" and "properties" in out and "required" in out:
        out["required"] = sorted(out["required"])
    return out


def openapi_schema() -> dict[str, Any]:
    """The ``openAPIV3Schema`` of the CRD (also what the tests validate objects with)."""
    raw = msgspec.json.schema(NodeInterferenceReport)
    defs = raw.get("$defs", {})
    top = _inline(raw, defs)
    schema = _structural(top)
    props = schema["properties"]
    props["metadata"] = {"type": "object"}
    props["apiVersion"] = {"type": "string"}
    props["kind"] = {"type": "string"}
    schema.pop("required", None)
    conditions = props["status"]["properties"]["conditions"]
    conditions["x-kubernetes-list-type"] = "map"
    conditions["x-kubernetes-list-map-keys"] = ["type"]
    # Unique policy names, as the DetectionRuleConfig's CEL rule says (readers key by name).
    policies = props["status"]["properties"]["config"]["properties"]["policies"]
    policies["x-kubernetes-list-type"] = "map"
    policies["x-kubernetes-list-map-keys"] = ["name"]
    schema["description"] = (
        "Per-node hardware interference as seen by MCO, written by mco-reporter. Layouts: one "
        "object named cluster holding every node, or one object per node named after it."
    )
    return schema


def _columns() -> list[dict[str, Any]]:
    """From ``status.summary``, never ``status.nodes.*`` (that is whichever node comes first:
    a quiet one would hide a violating one on the cluster object)."""
    summary = ".status.summary"
    scope = "the whole report on the object named cluster, the node on a per-node object"
    return [
        {
            "name": "Nodes",
            "type": "integer",
            "jsonPath": f"{summary}.nodes",
            "description": f"Nodes covered: {scope}.",
        },
        {
            "name": "Max Level",
            "type": "number",
            "jsonPath": f"{summary}.maxLevel",
            "description": f"Highest interference level, 0-1 ({scope}).",
        },
        {
            "name": "Min Score",
            "type": "number",
            "jsonPath": f"{summary}.minScore",
            "description": f"Lowest schedule score, 0-100 ({scope}).",
        },
        {
            "name": "Unschedulable",
            "type": "integer",
            "jsonPath": f"{summary}.unschedulable",
            "description": f"Nodes breaking a hard constraint ({scope}).",
        },
        {
            "name": "Stale",
            "type": "integer",
            "jsonPath": f"{summary}.stale",
            "description": "Nodes whose data is older than staleAfter (object named cluster).",
        },
        {"name": "Last Sync", "type": "date", "jsonPath": ".status.lastSyncTime"},
        {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    ]


def crd() -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": KIND.lower(),
                "shortNames": ["nir"],
                "categories": ["mco"],
            },
            "scope": "Cluster",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": _columns(),
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


def render_crd() -> str:
    header = (
        "# NodeInterferenceReport CRD, generated by reporter.crd from reporter/schema.py.\n"
        "# Do not edit: run `make generate`.\n"
    )
    return header + yaml.safe_dump(crd(), sort_keys=False, width=100)


def generated_files() -> dict[str, str]:
    return {CRD_PATH: render_crd()}
