"""``mco-extender print-config``: the scheduler-side configuration that points at this extender.

Volcano: one tier holding the ``extender`` plugin with the predicate and prioritize verbs and the
allocate/deallocate event verbs (placements, for reservations), ``ignorable: true`` (a slow or
absent extender must never stop scheduling) and ``VOLCANO_HTTP_TIMEOUT``.
kube-scheduler: a KubeSchedulerConfiguration a second scheduler runs as is (the upstream
"configure multiple schedulers" pattern): its own profile ``schedulerName`` (a default-named
profile would compete with the cluster's scheduler) and its own Lease (the default
``kube-system/kube-scheduler`` is the cluster scheduler's: beside it a second one would wait for
that lease forever), plus an ``extenders`` entry with ``nodeCacheCapable`` (names instead of
full Node objects on the wire), ``ignorable`` and ``KUBE_SCHEDULER_HTTP_TIMEOUT``. The chart's
ConfigMap is the same document.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import yaml

from extender.config import DEFAULT_PORT
from mco.flags import duration, go_duration
from mco.settings import Parser, parse

DEFAULT_URL = f"http://mco-extender.mco-system.svc:{DEFAULT_PORT}"
DEFAULT_CA_FILE = "/etc/kubernetes/mco-extender/ca.crt"
DEFAULT_SCHEDULER_NAME = "mco-kube-scheduler"
DEFAULT_LEASE_NAMESPACE = "kube-system"
# A pod's spec.schedulerName and a Lease's name are DNS subdomains; a namespace is a DNS label.
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
_NAMES = {
    "--scheduler-name": (re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*"), 253),
    "--lease-namespace": (re.compile(_DNS_LABEL), 63),
}

# Each scheduler's timeout per extender call, in seconds: the one source of print-config's
# defaults, the chart's values.yaml and every doc that quotes them (tests/chart/
# test_http_timeout.py). Volcano's one timeout covers every verb, and its prioritize call
# carries every passing node's NodeInfo (~100 MB from 1,000 nodes up): end to end it took
# p99 1.1-3.1 s at 1,000-5,000 nodes on a loaded 2-core VM (docs/benchmarks.md, "Volcano call
# volume"), over Volcano's own 1 s default, and a prioritize that times out leaves the task
# without MCO's scores. kube-scheduler's calls carry node names only: p99 under 50 ms at 5,000
# nodes on the same VM, so 1 s keeps a 20 x margin and costs a blocked scheduler (a
# NetworkPolicy dropping its calls) 1 s per call, not 4.
VOLCANO_HTTP_TIMEOUT = 4.0
KUBE_SCHEDULER_HTTP_TIMEOUT = 1.0


def volcano_tier(url: str, http_timeout: str) -> list[dict[str, Any]]:
    return [
        {
            "plugins": [
                {
                    "name": "extender",
                    "arguments": {
                        "extender.urlPrefix": f"{url.rstrip('/')}/volcano",
                        "extender.httpTimeout": http_timeout,
                        "extender.ignorable": True,
                        "extender.predicateVerb": "predicate",
                        "extender.prioritizeVerb": "prioritize",
                        # Volcano >= 1.13: each task's placement, for reservations.
                        "extender.allocateFuncVerb": "allocate",
                        "extender.deallocateFuncVerb": "deallocate",
                    },
                }
            ]
        }
    ]


def kube_scheduler_config(
    url: str,
    *,
    weight: int,
    http_timeout: str,
    scheduler_name: str = DEFAULT_SCHEDULER_NAME,
    leader_elect: bool = False,
    lease_namespace: str = DEFAULT_LEASE_NAMESPACE,
    ca_file: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
) -> dict[str, Any]:
    extender: dict[str, Any] = {
        "urlPrefix": f"{url.rstrip('/')}/scheduler",
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "weight": weight,
        "nodeCacheCapable": True,
        "ignorable": True,
        "httpTimeout": http_timeout,
    }
    if url.startswith("https://"):
        # Without a CA file kube-scheduler would skip server verification: always name one.
        tls: dict[str, str] = {"caFile": ca_file or DEFAULT_CA_FILE}
        if cert_file and key_file:
            tls.update(certFile=cert_file, keyFile=key_file)
        extender.update(enableHTTPS=True, tlsConfig=tls)
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        # The Lease is named after the scheduler, so that replicas of this scheduler elect among
        # themselves and never wait on the cluster scheduler's kube-system/kube-scheduler.
        "leaderElection": {
            "leaderElect": leader_elect,
            "resourceName": scheduler_name,
            "resourceNamespace": lease_namespace,
        },
        "profiles": [{"schedulerName": scheduler_name}],
        "extenders": [extender],
    }


_VOLCANO_HEADER = """\
# mco-extender for Volcano: append this tier to `tiers:` in volcano-scheduler.conf
# (ConfigMap volcano-system/volcano-scheduler-configmap). As the last tier, the extender is
# asked only about (task, node) pairs that every other predicate already accepted.
"""
_VOLCANO_HTTPS = """\
# Volcano's client trusts only the system CA roots and sends no client certificate: serve
# Volcano with a certificate those roots trust, and without client certificates
# (client_auth_type NoClientCert in --web.config.file).
"""
_KUBE_HEADER = """\
# mco-extender for kube-scheduler. Run a second kube-scheduler with this file as --config: it
# schedules the pods whose spec.schedulerName is its profile's, elects its leader on its own
# Lease, and asks the extender. Or merge only `extenders` into your scheduler's configuration.
# Scores are 0-10; kube-scheduler multiplies them by weight x 10 before adding them to the
# in-tree plugins' scores.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mco-extender print-config",
        description="Print the scheduler configuration that enables mco-extender.",
    )
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--volcano", action="store_true", help="a volcano-scheduler.conf tier")
    which.add_argument(
        "--kube-scheduler", action="store_true", help="a KubeSchedulerConfiguration extender"
    )
    parser.add_argument(
        "--url", default=DEFAULT_URL, help=f"extender base URL (default {DEFAULT_URL})"
    )
    parser.add_argument(
        "--http-timeout",
        type=duration,
        default=None,
        metavar="DURATION",
        help=f"per-call timeout (default {go_duration(VOLCANO_HTTP_TIMEOUT)} for Volcano, whose "
        "prioritize carries every passing node's NodeInfo; "
        f"{go_duration(KUBE_SCHEDULER_HTTP_TIMEOUT)} for kube-scheduler)",
    )
    parser.add_argument("--weight", type=int, default=1, help="kube-scheduler weight (> 0)")
    parser.add_argument(
        "--scheduler-name",
        default=DEFAULT_SCHEDULER_NAME,
        help="kube-scheduler: the profile's schedulerName, also its Lease's name "
        f"(default {DEFAULT_SCHEDULER_NAME})",
    )
    parser.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="kube-scheduler: leader election, for more than one replica (default off)",
    )
    parser.add_argument(
        "--lease-namespace",
        default=DEFAULT_LEASE_NAMESPACE,
        help=f"kube-scheduler: namespace of its Lease (default {DEFAULT_LEASE_NAMESPACE})",
    )
    parser.add_argument("--ca-file", help="kube-scheduler: CA that signed the extender's cert")
    parser.add_argument("--client-cert-file", help="kube-scheduler: client certificate (mTLS)")
    parser.add_argument("--client-key-file", help="kube-scheduler: client key (mTLS)")
    return parser


@dataclass(frozen=True, slots=True)
class PrintConfigSettings:
    scheduler: str  # "volcano" or "kube-scheduler"
    url: str = DEFAULT_URL
    http_timeout: float | None = None  # seconds
    weight: int = 1
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    leader_elect: bool = False
    lease_namespace: str = DEFAULT_LEASE_NAMESPACE
    ca_file: str | None = None
    client_cert_file: str | None = None
    client_key_file: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> PrintConfigSettings:
        if not args.url.startswith(("http://", "https://")):
            raise ValueError("--url must start with http:// or https://")
        if args.http_timeout is not None and args.http_timeout <= 0:
            raise ValueError("--http-timeout must be positive")
        if args.weight <= 0:
            raise ValueError(
                "--weight must be positive (kube-scheduler rejects 0 with a prioritizeVerb)"
            )
        for flag, name in (
            ("--scheduler-name", args.scheduler_name),
            ("--lease-namespace", args.lease_namespace),
        ):
            pattern, longest = _NAMES[flag]
            if not pattern.fullmatch(name) or len(name) > longest:
                raise ValueError(f"{flag} must be a Kubernetes name, got {name!r}")
        return cls(
            scheduler="volcano" if args.volcano else "kube-scheduler",
            url=args.url,
            http_timeout=args.http_timeout,
            weight=args.weight,
            scheduler_name=args.scheduler_name,
            leader_elect=args.leader_elect,
            lease_namespace=args.lease_namespace,
            ca_file=args.ca_file,
            client_cert_file=args.client_cert_file,
            client_key_file=args.client_key_file,
        )


def main(argv: Sequence[str], out: TextIO | None = None) -> int:
    s = parse(build_parser(), list(argv), PrintConfigSettings.from_args)
    if s.scheduler == "volcano":
        header = _VOLCANO_HEADER + (_VOLCANO_HTTPS if s.url.startswith("https://") else "")
        doc: object = volcano_tier(s.url, go_duration(s.http_timeout or VOLCANO_HTTP_TIMEOUT))
    else:
        header = _KUBE_HEADER
        doc = kube_scheduler_config(
            s.url,
            weight=s.weight,
            http_timeout=go_duration(s.http_timeout or KUBE_SCHEDULER_HTTP_TIMEOUT),
            scheduler_name=s.scheduler_name,
            leader_elect=s.leader_elect,
            lease_namespace=s.lease_namespace,
            ca_file=s.ca_file,
            cert_file=s.client_cert_file,
            key_file=s.client_key_file,
        )
    (out or sys.stdout).write(header + yaml.safe_dump(doc, sort_keys=False))
    return 0
