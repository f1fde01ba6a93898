"""A pod's workload: the controller its pods share, the key learned interference profiles are
kept under (docs/reporter.md, "Workload profiles").

Two parts name it from different sources and must agree: the reporter from kube-state-metrics'
``kube_pod_info{created_by_kind, created_by_name}`` (the pod's controller owner reference), the
extender from the Pod object's ``metadata.ownerReferences``. Both go through `workload_key`.

A ReplicaSet's pods belong to its Deployment (the ReplicaSet is named
``<deployment>-<pod-template-hash>``, so a new rollout keeps the same key); a Job's pods belong
to its CronJob where the Job is named ``<cronjob>-<scheduled minutes>`` (the CronJob
controller's naming). StatefulSet, DaemonSet, a bare Job or ReplicaSet keep their own name. A
pod without a controller is keyed by its name less a generated suffix (``-<hash>``,
``-<ordinal>``), so two bare pods ``web-7c9f4`` and ``web-x2k8p`` share ``Pod/web``. A label
key (``--profile-label``) replaces all of this where users name workloads themselves.
"""

from __future__ import annotations

import re
from typing import Final

# kube-state-metrics writes this where a pod has no controller.
NO_OWNER: Final = "<none>"
# pod-template-hash: rand.SafeEncodeString of a 32-bit hash, consonants and digits, <= 10.
_TEMPLATE_HASH: Final = re.compile(r"^(.+)-[bcdfghjklmnpqrstvwxz2456789]{4,10}$")
# The CronJob controller names a Job <cronjob>-<scheduled time in minutes since the epoch>.
_CRONJOB_JOB: Final = re.compile(r"^(.+)-\d{8,10}$")
# A generated pod name suffix: generateName's 5 characters, or a number.
_POD_SUFFIX: Final = re.compile(r"^(.+?)(-[bcdfghjklmnpqrstvwxz2456789]{5}|-\d+)+$")
MAX_KEY: Final = 400  # namespace (63) + kind + a 253-character name, and the separators


def workload_key(namespace: str, kind: str, owner: str, pod: str = "") -> str:
    """``namespace/Kind/name`` of the workload a pod belongs to; "" when nothing names it (no
    owner and no pod name)."""
    namespace = namespace or "default"
    if kind and owner and kind != NO_OWNER and owner != NO_OWNER:
        if kind == "ReplicaSet" and (m := _TEMPLATE_HASH.match(owner)):
            return f"{namespace}/Deployment/{m.group(1)}"[:MAX_KEY]
        if kind == "Job" and (m := _CRONJOB_JOB.match(owner)):
            return f"{namespace}/CronJob/{m.group(1)}"[:MAX_KEY]
        return f"{namespace}/{kind}/{owner}"[:MAX_KEY]
    if not pod:
        return ""
    m = _POD_SUFFIX.match(pod)
    return f"{namespace}/Pod/{m.group(1) if m else pod}"[:MAX_KEY]


def labelled_key(namespace: str, label_key: str, value: str) -> str:
    """The key of a pod whose workload label ``label_key`` has ``value`` (``--profile-label``)."""
    return f"{namespace or 'default'}/{label_key}/{value}"[:MAX_KEY] if value else ""
