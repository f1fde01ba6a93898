"""The scheduler side of both extender protocols, as a scheduler sends them over HTTP.

Volcano's bodies follow its Go types field for field and in declaration order, written
compactly as Go's encoding/json writes them: the extender reads the tasks inside a NodeInfo by
finding their keys in that order in the raw body (``extender.volcano``), so a body in any other
shape would hide every pod on the node from it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from bench.placement.model import NODE_CPU, NODE_MEMORY
from bench.placement.trace import NAMESPACE, PodSpec
from testkit import bodies

Json = dict[str, Any]

# Volcano TaskStatus values (pkg/scheduler/api/types.go).
ALLOCATED, BOUND, RUNNING = 2, 16, 32
MAX_PODS = 110  # kubelet's default maxPods: the pods a node's Allocatable holds

encode = msgspec.json.Encoder().encode  # compact, keys in insertion order, as Go writes them


def pod_object(pod: PodSpec, node: str = "", uid: str = "") -> Json:
    """``uid`` tells apart the same trace pod in different clusters (reservations key on it)."""
    cpu_m, mem_mi = int(pod.demand.cpu * 1000), int(pod.demand.memory * 1024)
    kind, owner = pod.owner
    return {
        "metadata": {
            "name": pod.name,
            "namespace": NAMESPACE,
            "uid": uid or f"uid-{pod.name}",
            "labels": pod.labels,
            "annotations": {},
            # Its controller, as the extender's pod watch and the reporter (kube_pod_info)
            # name its workload; ObjectMeta's field order (Volcano's bodies keep Go's).
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1" if kind == "Job" else "apps/v1",
                    "kind": kind,
                    "name": owner,
                    "uid": f"uid-{owner}",
                    "controller": True,
                }
            ],
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
    """A TaskInfo in Go's field order, as Volcano sends it (the tests' builder)."""
    req = {"MilliCPU": pod.demand.cpu * 1000, "Memory": pod.demand.memory * 2**30}
    obj = pod_object(pod, node, uid)
    return bodies.task_info(obj, status=status, node_name=node, req=req, job=f"bench/{pod.name}")


def node_object(name: str) -> Json:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}}


def go_float(value: float) -> float | int:
    """A float64 as Go's encoding/json writes it: integral values without a fraction."""
    return int(value) if value.is_integer() else value


def resource(cpu: float, memory: float, pods: int | None) -> Json:
    """A Volcano Resource from cores and GiB (MilliCPU, bytes; the pod count as the `pods`
    scalar where Volcano counts it)."""
    return bodies.resource(go_float(cpu * 1000), go_float(memory * 2**30), pods=pods)


def node_info(
    name: str, tasks: list[Json], generation: int = 0, *, used: tuple[float, float] = (0.0, 0.0)
) -> Json:
    """A NodeInfo in Volcano's Go field order (Name, Node, State, Releasing, Pipelined, Idle,
    Used, Allocatable, Capacity, Tasks, ..., Generation): every task on the node, placed ones
    Bound, started ones Running; ``used``: the cores and GiB their requests add up to, which
    Used and Idle carry as Volcano's do (nothing is releasing or pipelined here). Generation
    moves whenever the node's tasks change, as Volcano's does: the extender skips a NodeInfo
    whose length and last bytes it has seen before."""
    cpu, memory = used
    whole = resource(NODE_CPU, NODE_MEMORY, MAX_PODS)
    return {
        "Name": name,
        "Node": node_object(name),
        "State": {"Phase": 1, "Reason": ""},
        "Releasing": resource(0.0, 0.0, None),
        "Pipelined": resource(0.0, 0.0, None),
        "Idle": resource(NODE_CPU - cpu, NODE_MEMORY - memory, MAX_PODS - len(tasks)),
        "Used": resource(cpu, memory, len(tasks)),
        "Allocatable": whole,
        "Capacity": whole,
        "Tasks": {f"bench/{t['Name']}": t for t in tasks},
        "Generation": generation,
        "BindGeneration": generation,
    }
