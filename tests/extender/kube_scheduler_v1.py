"""kube-scheduler's own checks of a ``kubescheduler.config.k8s.io/v1`` file, for the fields MCO
writes: strict decoding (an unknown or misspelt field is an error, as kube-scheduler's
``--config`` loader reports it) and the validation that made the chart's first ConfigMap useless
as a second scheduler (issue 26: no profile name, the cluster scheduler's Lease).

The field sets are the JSON names of the Go types in ``k8s.io/kube-scheduler/config/v1``
(``KubeSchedulerConfiguration``, ``KubeSchedulerProfile``, ``Extender``, ``ExtenderTLSConfig``)
and ``k8s.io/component-base/config/v1alpha1`` (``LeaderElectionConfiguration``), Kubernetes
v1.36.
"""

from __future__ import annotations

import re
from typing import Any

TOP = {
    "apiVersion", "kind", "parallelism", "leaderElection", "clientConnection",
    "enableProfiling", "enableContentionProfiling", "percentageOfNodesToScore",
    "percentageOfPlacementsToScore", "podInitialBackoffSeconds", "podMaxBackoffSeconds",
    "profiles", "extenders", "delayCacheUntilActive",
}  # fmt: skip
LEADER_ELECTION = {
    "leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceLock",
    "resourceName", "resourceNamespace",
}  # fmt: skip
PROFILE = {"schedulerName", "percentageOfNodesToScore", "percentageOfPlacementsToScore",
           "plugins", "pluginConfig"}  # fmt: skip
EXTENDER = {
    "urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight", "bindVerb",
    "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable", "managedResources",
    "ignorable",
}  # fmt: skip
TLS = {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData", "keyData", "caData"}
# The Lease kube-scheduler uses unless told otherwise: the cluster scheduler's.
DEFAULT_LEASE = ("kube-system", "kube-scheduler")
_GO_DURATION = re.compile(r"([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+")


def _known(obj: Any, fields: set[str], where: str) -> list[str]:
    if not isinstance(obj, dict):
        return [f"{where}: not an object"]
    return [f"{where}.{k}: unknown field" for k in obj if k not in fields]


def problems(doc: Any) -> list[str]:
    """What kube-scheduler would refuse in ``doc``, plus a second scheduler's two traps."""
    out = _known(doc, TOP, "")
    if out:
        return out
    if doc.get("apiVersion") != "kubescheduler.config.k8s.io/v1":
        out.append(f"apiVersion {doc.get('apiVersion')!r}")
    if doc.get("kind") != "KubeSchedulerConfiguration":
        out.append(f"kind {doc.get('kind')!r}")
    le = doc.get("leaderElection", {})
    out += _known(le, LEADER_ELECTION, ".leaderElection")
    if not isinstance(le.get("leaderElect", False), bool):
        out.append(".leaderElection.leaderElect: not a bool")
    lease = (
        le.get("resourceNamespace", DEFAULT_LEASE[0]),
        le.get("resourceName", DEFAULT_LEASE[1]),
    )
    if lease == DEFAULT_LEASE:
        out.append("the cluster scheduler's Lease kube-system/kube-scheduler")
    profiles = doc.get("profiles") or []
    names = []
    for i, p in enumerate(profiles):
        out += _known(p, PROFILE, f".profiles[{i}]")
        names.append(p.get("schedulerName"))
    if not names or None in names or "default-scheduler" in names:
        out.append(f"profiles {names}: a second scheduler needs its own schedulerName")
    if len(set(names)) != len(names):
        out.append(f"profiles {names}: duplicate schedulerName")
    for i, e in enumerate(doc.get("extenders") or []):
        where = f".extenders[{i}]"
        out += _known(e, EXTENDER, where)
        if not isinstance(e.get("urlPrefix"), str) or not e["urlPrefix"]:
            out.append(f"{where}.urlPrefix: empty")
        if e.get("prioritizeVerb") and not (isinstance(e.get("weight"), int) and e["weight"] > 0):
            out.append(f"{where}.weight: must be positive with a prioritizeVerb")
        if "httpTimeout" in e and not _GO_DURATION.fullmatch(str(e["httpTimeout"])):
            out.append(f"{where}.httpTimeout: not a Go duration")
        for flag in ("enableHTTPS", "nodeCacheCapable", "ignorable"):
            if not isinstance(e.get(flag, False), bool):
                out.append(f"{where}.{flag}: not a bool")
        if "tlsConfig" in e:
            out += _known(e["tlsConfig"], TLS, f"{where}.tlsConfig")
    return out
