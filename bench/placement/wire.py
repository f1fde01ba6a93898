"""The scheduler side of both extender protocols, as a scheduler sends them over HTTP."""

from __future__ import annotations

from typing import Any

from bench.placement.trace import PodSpec

Json = dict[str, Any]

# Volcano TaskStatus values (pkg/scheduler/api/types.go).
ALLOCATED, BOUND, RUNNING = 2, 16, 32


def pod_object(pod: PodSpec, node: str = "", uid: str = "") -> Json:
    """``uid`` tells apart the same trace pod in different clusters (reservations key on it)."""
    cpu_m, mem_mi = int(pod.demand.cpu * 1000), int(pod.demand.memory * 1024)
    return {
        "metadata": {
            "name": pod.name,
            "namespace": "bench",
            "uid": uid or f"uid-{pod.name}",
            "labels": pod.labels,
            "annotations": {},
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": "app",
                    "resources": {"requests": {"cpu": f"{cpu_m}m", "memory": f"{mem_mi}Mi"}},
                }
            ],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def task_info(pod: PodSpec, node: str = "", status: int = 1, uid: str = "") -> Json:
    req = {"MilliCPU": pod.demand.cpu * 1000, "Memory": pod.demand.memory * 2**30}
    return {
        "UID": uid or f"uid-{pod.name}",
        "Job": f"bench/{pod.name}",
        "Name": pod.name,
        "Namespace": "bench",
        "Resreq": req,
        "InitResreq": req,
        "NodeName": node,
        "Status": status,
        "Priority": 0,
        "Pod": pod_object(pod, node, uid),
    }


def node_object(name: str) -> Json:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}


def node_info(name: str, tasks: list[Json]) -> Json:
    """A NodeInfo in Volcano's Go field order (Name, Node, State, ..., Tasks).

    Tasks carries the pods placed there and not yet running (Bound); running pods are left
    out to keep bodies small (the extender reads only placements its data cannot show yet).
    """
    return {
        "Name": name,
        "Node": node_object(name),
        "State": {"Phase": 1, "Reason": ""},
        "Tasks": {f"bench/{t['Name']}": t for t in tasks},
    }
