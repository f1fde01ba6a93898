"""Realistic scheduler request bodies, built from the wire-protocol reference document.

Shapes follow ``shared/reference/scheduler-extender-protocols.md``: Volcano serialises its
scheduler types with Go field names and no ``omitempty`` (every key present, ``null`` for nil),
and embeds full Kubernetes objects (Pods with managedFields, Nodes with image lists) in their
camelCase form. Go's encoder escapes ``<``, ``>`` and ``&`` inside strings, so these bodies do
too. Everything is generated deterministically from a seed; nothing here is captured traffic.

Used by the contract tests and by ``bench/extender.py`` (a ~220 KB predicate body).
"""

from __future__ import annotations

import json
import random
from typing import Any

Json = dict[str, Any]

KATA_LABEL = "katacontainers.io/kata-runtime"
_TS = "2026-03-14T09:26:53Z"


def go_json(obj: object) -> bytes:
    """Compact JSON as Go's encoding/json writes it (HTML-safe escapes)."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
    text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return text.encode()


def _uid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def resource(cpu_milli: float, mem: float, gpus: int = 0, pods: int | None = 1) -> Json:
    scalar: Json = {}
    if gpus:
        scalar["nvidia.com/gpu"] = gpus * 1000
    if pods is not None:
        scalar["pods"] = pods
    return {
        "MilliCPU": cpu_milli,
        "Memory": mem,
        "ScalarResources": scalar or None,
        "MaxTaskNum": 0,
    }


def pod(
    name: str,
    namespace: str = "team-a",
    *,
    runtime_class: str | None = None,
    node_name: str = "",
    phase: str = "Pending",
    seed: int = 0,
    labels: dict[str, str] | None = None,
) -> Json:
    """A full v1.Pod as the API server returns it, managedFields included (~5-7 KB);
    ``labels`` are added to the Volcano job's."""
    rng = random.Random(f"pod/{namespace}/{name}/{seed}")
    group = name.rsplit("-", 2)[0]
    containers = [
        {
            "name": cname,
            "image": f"registry.example.com/{group}/{cname}:v1.{rng.randint(0, 40)}",
            "command": ["/bin/entrypoint", "--config=/etc/app/config.yaml", "--log-level=info"],
            "args": ["--port=8080", f"--shard={rng.randint(0, 63)}", "--threshold=a<b&c>d"],
            "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
            "env": [
                {
                    "name": "POD_NAME",
                    "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
                },
                {
                    "name": "POD_NAMESPACE",
                    "valueFrom": {
                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}
                    },
                },
                {
                    "name": "NODE_NAME",
                    "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}},
                },
                {
                    "name": "GOMAXPROCS",
                    "valueFrom": {
                        "resourceFieldRef": {
                            "containerName": cname,
                            "resource": "limits.cpu",
                            "divisor": "0",
                        }
                    },
                },
                {
                    "name": "JAVA_OPTS",
                    "value": "-XX:+UseG1GC -XX:MaxRAMPercentage=75 -Dfile.encoding=UTF-8",
                },
            ],
            "resources": {
                "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
            },
            "volumeMounts": [
                {"name": "config", "readOnly": True, "mountPath": "/etc/app"},
                {"name": "scratch", "mountPath": "/scratch"},
                {
                    "name": "kube-api-access-x7k2p",
                    "readOnly": True,
                    "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                },
            ],
            "livenessProbe": {
                "httpGet": {"path": "/healthz", "port": 8080, "scheme": "HTTP"},
                "initialDelaySeconds": 10,
                "timeoutSeconds": 1,
                "periodSeconds": 10,
                "successThreshold": 1,
                "failureThreshold": 3,
            },
            "readinessProbe": {
                "httpGet": {"path": "/readyz", "port": 8080, "scheme": "HTTP"},
                "timeoutSeconds": 1,
                "periodSeconds": 5,
                "successThreshold": 1,
                "failureThreshold": 3,
            },
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent",
            "securityContext": {
                "capabilities": {"drop": ["ALL"]},
                "runAsNonRoot": True,
                "allowPrivilegeEscalation": False,
            },
        }
        for cname in ("main", "sidecar")
    ]
    spec: Json = {
        "volumes": [
            {"name": "config", "configMap": {"name": f"{group}-config", "defaultMode": 420}},
            {"name": "scratch", "emptyDir": {"sizeLimit": "10Gi"}},
            {
                "name": "kube-api-access-x7k2p",
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {
                            "configMap": {
                                "name": "kube-root-ca.crt",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            }
                        },
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {
                                            "apiVersion": "v1",
                                            "fieldPath": "metadata.namespace",
                                        },
                                    }
                                ]
                            }
                        },
                    ],
                    "defaultMode": 420,
                },
            },
        ],
        "containers": containers,
        "restartPolicy": "OnFailure",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "securityContext": {"fsGroup": 2000},
        "schedulerName": "volcano",
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ],
        "priorityClassName": "batch-low",
        "priority": 100,
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
    }
    if node_name:
        spec["nodeName"] = node_name
    if runtime_class is not None:
        spec["runtimeClassName"] = runtime_class
        spec["overhead"] = {"cpu": "250m", "memory": "160Mi"}
    managed_fields = [
        {
            "manager": "vc-controller-manager",
            "operation": "Update",
            "apiVersion": "v1",
            "time": _TS,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {
                    "f:annotations": {
                        ".": {},
                        "f:scheduling.k8s.io/group-name": {},
                        "f:volcano.sh/job-name": {},
                        "f:volcano.sh/task-spec": {},
                    },
                    "f:labels": {
                        ".": {},
                        "f:volcano.sh/job-name": {},
                        "f:volcano.sh/job-namespace": {},
                        "f:volcano.sh/queue-name": {},
                    },
                    "f:ownerReferences": {".": {}, f'k:{{"uid":"{_uid(rng)}"}}': {}},
                },
                "f:spec": {
                    "f:containers": {
                        f'k:{{"name":"{c["name"]}"}}': {
                            ".": {},
                            "f:args": {},
                            "f:command": {},
                            "f:env": {
                                ".": {},
                                'k:{"name":"POD_NAME"}': {
                                    ".": {},
                                    "f:name": {},
                                    "f:valueFrom": {".": {}, "f:fieldRef": {}},
                                },
                            },
                            "f:image": {},
                            "f:imagePullPolicy": {},
                            "f:name": {},
                            "f:ports": {},
                            "f:resources": {".": {}, "f:limits": {}, "f:requests": {}},
                            "f:terminationMessagePath": {},
                            "f:terminationMessagePolicy": {},
                            "f:volumeMounts": {},
                        }
                        for c in containers
                    },
                    "f:dnsPolicy": {},
                    "f:enableServiceLinks": {},
                    "f:restartPolicy": {},
                    "f:schedulerName": {},
                    "f:securityContext": {},
                    "f:terminationGracePeriodSeconds": {},
                    "f:volumes": {},
                },
            },
        },
        {
            "manager": "kubelet",
            "operation": "Update",
            "apiVersion": "v1",
            "time": _TS,
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:status": {
                    "f:conditions": {
                        'k:{"type":"ContainersReady"}': {
                            ".": {},
                            "f:lastProbeTime": {},
                            "f:lastTransitionTime": {},
                            "f:status": {},
                            "f:type": {},
                        }
                    },
                    "f:containerStatuses": {},
                    "f:hostIP": {},
                    "f:phase": {},
                    "f:podIP": {},
                    "f:podIPs": {},
                    "f:startTime": {},
                }
            },
            "subresource": "status",
        },
    ]
    status: Json = {"phase": phase, "qosClass": "Guaranteed"}
    if phase == "Running":
        status.update(
            {
                "conditions": [
                    {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": _TS}
                    for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
                ],
                "hostIP": f"10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
                "podIP": f"10.244.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
                "podIPs": [{"ip": f"10.244.{rng.randint(0, 255)}.{rng.randint(1, 254)}"}],
                "startTime": _TS,
                "containerStatuses": [
                    {
                        "name": c["name"],
                        "state": {"running": {"startedAt": _TS}},
                        "lastState": {},
                        "ready": True,
                        "restartCount": 0,
                        "image": c["image"],
                        "imageID": f"{c['image']}@sha256:{rng.getrandbits(256):064x}",
                        "containerID": f"containerd://{rng.getrandbits(256):064x}",
                        "started": True,
                    }
                    for c in containers
                ],
            }
        )
    else:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "lastProbeTime": None,
                "lastTransitionTime": _TS,
                "reason": "Unschedulable",
                "message": "0/40 nodes are available: 40 node(s) didn't match pod topology "
                "spread constraints.",
            }
        ]
    return {
        "metadata": {
            "name": name,
            "generateName": f"{group}-",
            "namespace": namespace,
            "uid": _uid(rng),
            "resourceVersion": str(rng.randint(10**6, 10**8)),
            "creationTimestamp": _TS,
            "labels": {
                "volcano.sh/job-name": group,
                "volcano.sh/job-namespace": namespace,
                "volcano.sh/queue-name": "research",
                "volcano.sh/task-spec": "worker",
                **(labels or {}),
            },
            "annotations": {
                "scheduling.k8s.io/group-name": group,
                "volcano.sh/job-name": group,
                "volcano.sh/task-spec": "worker",
                "volcano.sh/job-version": "0",
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch.volcano.sh/v1alpha1",
                    "kind": "Job",
                    "name": group,
                    "uid": _uid(rng),
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": managed_fields,
        },
        "spec": spec,
        "status": status,
    }


def node(name: str, *, kata: bool | None = None, images: int = 40, seed: int = 0) -> Json:
    """A full v1.Node (~15-20 KB with its image list)."""
    rng = random.Random(f"node/{name}/{seed}")
    labels = {
        "beta.kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "node.kubernetes.io/instance-type": "gpu-8x-h100",
        "topology.kubernetes.io/region": "eu-west-4",
        "topology.kubernetes.io/zone": f"eu-west-4{'abc'[rng.randint(0, 2)]}",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel",
        "feature.node.kubernetes.io/kernel-version.full": "6.1.0-18-amd64",
    }
    if kata is not None:
        labels[KATA_LABEL] = "true" if kata else "false"
    image_list = [
        {
            "names": [
                f"registry.example.com/lib/image-{i}@sha256:{rng.getrandbits(256):064x}",
                f"registry.example.com/lib/image-{i}:v{rng.randint(1, 9)}.{rng.randint(0, 30)}",
            ],
            "sizeBytes": rng.randint(10**7, 5 * 10**9),
        }
        for i in range(images)
    ]
    return {
        "metadata": {
            "name": name,
            "uid": _uid(rng),
            "resourceVersion": str(rng.randint(10**6, 10**8)),
            "creationTimestamp": _TS,
            "labels": labels,
            "annotations": {
                "node.alpha.kubernetes.io/ttl": "0",
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                "csi.volume.kubernetes.io/nodeid": json.dumps(
                    {"ebs.csi.aws.com": f"i-{rng.getrandbits(64):016x}"}
                ),
            },
            "managedFields": [
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": _TS,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:metadata": {"f:labels": {".": {}, **{f"f:{k}": {} for k in labels}}}
                    },
                },
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": _TS,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {
                        "f:status": {
                            "f:allocatable": {"f:cpu": {}, "f:memory": {}, "f:nvidia.com/gpu": {}},
                            "f:conditions": {},
                            "f:images": {},
                            "f:nodeInfo": {},
                        }
                    },
                    "subresource": "status",
                },
            ],
        },
        "spec": {
            "podCIDR": f"10.244.{rng.randint(0, 255)}.0/24",
            "podCIDRs": [f"10.244.{rng.randint(0, 255)}.0/24"],
            "providerID": f"aws:///eu-west-4a/i-{rng.getrandbits(64):016x}",
            "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": {
                "cpu": "96",
                "ephemeral-storage": "1965645800Ki",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": "1056458752Ki",
                "nvidia.com/gpu": "8",
                "pods": "110",
            },
            "allocatable": {
                "cpu": "95500m",
                "ephemeral-storage": "1811544488585",
                "hugepages-1Gi": "0",
                "hugepages-2Mi": "0",
                "memory": "1045870592Ki",
                "nvidia.com/gpu": "8",
                "pods": "110",
            },
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "lastHeartbeatTime": _TS,
                    "lastTransitionTime": _TS,
                    "reason": r,
                    "message": m,
                }
                for t, s, r, m in (
                    (
                        "MemoryPressure",
                        "False",
                        "KubeletHasSufficientMemory",
                        "kubelet has sufficient memory available",
                    ),
                    (
                        "DiskPressure",
                        "False",
                        "KubeletHasNoDiskPressure",
                        "kubelet has no disk pressure",
                    ),
                    (
                        "PIDPressure",
                        "False",
                        "KubeletHasSufficientPID",
                        "kubelet has sufficient PID available",
                    ),
                    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
                )
            ],
            "addresses": [
                {
                    "type": "InternalIP",
                    "address": f"10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}",
                },
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {
                "machineID": f"{rng.getrandbits(128):032x}",
                "systemUUID": _uid(rng),
                "bootID": _uid(rng),
                "kernelVersion": "6.1.0-18-amd64",
                "osImage": "Debian GNU/Linux 12 (bookworm)",
                "containerRuntimeVersion": "containerd://1.7.13",
                "kubeletVersion": "v1.30.2",
                "kubeProxyVersion": "v1.30.2",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
            "images": image_list,
        },
    }


def task_info(
    p: Json, *, status: int = 1, node_name: str = "", req: Json | None = None, job: str = ""
) -> Json:
    """A Volcano TaskInfo wrapping a full Pod: Go's field names, every key present, in Go's
    declaration order (the extender finds a NodeInfo's tasks by that order in the raw body).
    ``req`` defaults to a 4-CPU, 16 GiB, 1-GPU worker; ``job`` to the pod's Volcano job label."""
    meta = p["metadata"]
    req = req if req is not None else resource(4000, 17179869184, gpus=1)
    return {
        "UID": meta["uid"],
        "Job": job or f"{meta['namespace']}/{meta['labels']['volcano.sh/job-name']}",
        "Name": meta["name"],
        "Namespace": meta["namespace"],
        "TaskRole": "worker",
        "Resreq": req,
        "InitResreq": req,
        "DRAResreq": None,
        "ResourceClaimKeys": None,
        "ResourceClaimDRAResreq": None,
        "NodeName": node_name,
        "EvictionOccurred": False,
        "JobAllocatedHyperNode": "",
        "Status": status,
        "LastTransaction": None,
        "Priority": 100,
        "VolumeReady": False,
        "Preemptable": False,
        "BestEffort": False,
        "HasRestartableInitContainer": False,
        "SchGated": False,
        "RevocableZone": "",
        "NumaInfo": None,
        "Pod": p,
        "PodAnnotations": meta["annotations"],
        "CustomBindErrHandlerSucceeded": False,
    }


def node_info(name: str, *, tasks: int = 30, kata: bool | None = None, seed: int = 0) -> Json:
    """A Volcano NodeInfo: the full Node plus every pod on it as a TaskInfo."""
    n = node(name, kata=kata, seed=seed)
    running = {}
    for i in range(tasks):
        ns = ("team-b", "team-c", "batch")[i % 3]
        pname = f"job{i % 7}-worker-{i}"
        p = pod(pname, ns, node_name=name, phase="Running", seed=seed)
        running[f"{ns}/{pname}"] = task_info(p, status=32, node_name=name)
    return {
        "Name": name,
        "Node": n,
        "State": {"Phase": 1, "Reason": ""},
        "Releasing": resource(0, 0, pods=None),
        "Pipelined": resource(0, 0, pods=None),
        "Idle": resource(
            95500 - 4000 * tasks // 4,
            1.07e12 - 1.7e10 * tasks // 4,
            gpus=8 - min(tasks // 4, 8),
            pods=110 - tasks,
        ),
        "Used": resource(
            4000 * tasks // 4, 1.7e10 * tasks // 4, gpus=min(tasks // 4, 8), pods=tasks
        ),
        "Allocatable": resource(95500, 1.0709715e12, gpus=8, pods=110),
        "Capacity": resource(96000, 1.081813762e12, gpus=8, pods=110),
        "ResourceUsage": {
            "MetricsTime": "0001-01-01T00:00:00Z",
            "CPUUsageAvg": None,
            "MEMUsageAvg": None,
        },
        "Tasks": running,
        "NumaInfo": None,
        "UnassignedNumaPods": None,
        "NumaSchedulerInfo": None,
        "RevocableZone": "",
        "Others": None,
        "OversubscriptionNode": False,
        "OfflineJobEvicting": False,
        "OversubscriptionResource": resource(0, 0, pods=None),
        "ImageStates": {
            img["names"][1]: {"Size": img["sizeBytes"], "NumNodes": 12, "Nodes": None}
            for img in n["status"]["images"]
        },
        "Generation": 1042,
        "BindGeneration": 17,
    }


def pending_task(
    name: str = "train-42-worker-0",
    *,
    runtime_class: str | None = None,
    labels: dict[str, str] | None = None,
) -> Json:
    return task_info(pod(name, "team-a", runtime_class=runtime_class, labels=labels))


def volcano_predicate(
    node_name: str,
    *,
    tasks: int = 30,
    runtime_class: str | None = None,
    kata: bool | None = None,
    labels: dict[str, str] | None = None,
) -> bytes:
    """``{"task": TaskInfo, "node": NodeInfo}``; ~220 KB with the default 30 tasks."""
    return go_json(
        {
            "task": pending_task(runtime_class=runtime_class, labels=labels),
            "node": node_info(node_name, tasks=tasks, kata=kata),
        }
    )


def volcano_prioritize(
    node_names: list[str],
    *,
    tasks: int = 30,
    runtime_class: str | None = None,
    labels: dict[str, str] | None = None,
) -> bytes:
    """``{"task": TaskInfo, "nodes": [NodeInfo, ...]}``. Built from one template per call."""
    template = node_info("__NODE__", tasks=tasks)
    raw = go_json(template)
    task = go_json(pending_task(runtime_class=runtime_class, labels=labels))
    parts = [raw.replace(b"__NODE__", n.encode()) for n in node_names]
    return b'{"task":' + task + b',"nodes":[' + b",".join(parts) + b"]}"


def kube_args(
    node_names: list[str],
    *,
    node_cache_capable: bool = True,
    runtime_class: str | None = None,
    kata_labels: dict[str, bool] | None = None,
    labels: dict[str, str] | None = None,
) -> bytes:
    """kube-scheduler ExtenderArgs: exactly one of ``Nodes`` / ``NodeNames`` is non-null."""
    p = pod("web-7d4b9c-x2x9q", "shop", runtime_class=runtime_class, labels=labels)
    p["spec"]["schedulerName"] = "default-scheduler"
    if node_cache_capable:
        body: Json = {"Pod": p, "Nodes": None, "NodeNames": node_names}
    else:
        kata_of = kata_labels or {}
        items = [node(n, kata=kata_of.get(n), images=10) for n in node_names]
        body = {"Pod": p, "Nodes": {"metadata": {}, "items": items}, "NodeNames": None}
    return go_json(body)
