"""``kubectl-mco`` (run as ``kubectl mco``): ``nodes``, ``why POD``, ``report``.

Exit codes: 0 done; 1 the cluster said no (a pod that is not there, a proxy refused, no
report); 2 a bad flag or kubeconfig, with one line on stderr as in every MCO binary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Callable
from typing import Any

import yaml
from kubernetes_asyncio.config import kube_config

from kubectl_mco import api, render
from mco.kubeconfig import kubeconfig_paths
from mco.settings import Parser, fail

PROG = "kubectl-mco"  # the console script; kubectl runs it as `kubectl mco`

NAMESPACE_DEFAULT = "default"


def _common() -> Parser:
    """Options accepted before or after the command (``kubectl mco -o json nodes`` and
    ``kubectl mco nodes -o json``); defaults are filled in by `_parser`. A new parser for each
    user: parents share their actions, and ``set_defaults`` would reach every copy."""
    where = api.Extender()
    common = Parser(add_help=False, argument_default=argparse.SUPPRESS)
    common.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)"
    )
    common.add_argument("--context", help="kubeconfig context (default: the current one)")
    common.add_argument(
        "--extender-namespace",
        help=f"namespace of the extender's Service (default: {where.namespace})",
    )
    common.add_argument(
        "--extender-service", help=f"the extender's Service (default: {where.service})"
    )
    common.add_argument(
        "--extender-port",
        help=f"the Service's port name (default: {where.port}; the chart names "
        "it after the scheme)",
    )
    common.add_argument(
        "--extender-scheme",
        choices=("http", "https"),
        help=f"how the API server talks to the extender (default: {where.scheme})",
    )
    common.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml"),
        help="human tables (default), or the answers as JSON or YAML",
    )
    return common  # fmt: skip


def _parser() -> Parser:
    where = api.Extender()
    top = Parser(
        prog=PROG,
        description="MCO's view of the cluster: node interference, and why a pod went where.",
        parents=[_common()],
    )
    top.set_defaults(
        kubeconfig=None,
        context=None,
        extender_namespace=where.namespace,
        extender_service=where.service,
        extender_port=where.port,
        extender_scheme=where.scheme,
        output="table",
    )
    sub = top.add_subparsers(dest="command", required=True)
    sub.add_parser(
        "nodes",
        parents=[_common()],
        help="every node's level, detections and verdict (GET /v1/nodes)",
    )
    why = sub.add_parser(
        "why", parents=[_common()], help="why a pod passes or not, node by node (POST /v1/explain)"
    )
    why.add_argument("pod")
    why.add_argument(
        "-n",
        "--namespace",
        default=None,
        help="the pod's namespace (default: the context's, else default)",
    )
    why.add_argument(
        "--node",
        action="append",
        default=None,
        help="explain this node only (repeatable; default: every known node)",
    )
    sub.add_parser("report", parents=[_common()], help="the NodeInterferenceReport's summary")
    return top  # fmt: skip


def _namespace(kubeconfig: str | None, context: str | None) -> str:
    """The namespace of the kubeconfig context, as kubectl defaults it."""
    try:
        loader = kube_config.KubeConfigLoader(
            config_dict=kube_config.KubeConfigMerger(kubeconfig_paths(kubeconfig)).config,
            active_context=context,
        )
        current: Any = loader.current_context
        found = current["context"].get("namespace")
    except Exception:  # no kubeconfig or no such context: connect() says so
        return NAMESPACE_DEFAULT
    return str(found) if found else NAMESPACE_DEFAULT


async def _run(args: argparse.Namespace) -> tuple[Any, Callable[[Any], list[str]]]:
    where = api.Extender(
        args.extender_namespace, args.extender_service, args.extender_port, args.extender_scheme
    )
    client = await api.connect(args.kubeconfig, args.context)
    async with client:
        if args.command == "nodes":
            body = await api.extender(client, where, "v1/nodes")
            return body, lambda b: [*render.nodes_table(b), "", render.NODES_LEGEND]
        if args.command == "report":
            found = await api.report(client)
            return found, render.report_summary
        namespace = args.namespace or _namespace(args.kubeconfig, args.context)
        pod = await api.pod(client, namespace, args.pod)
        request: dict[str, Any] = {"pod": pod}
        if args.node:
            request["nodes"] = args.node
        answer = await api.extender(client, where, "v1/explain", request)
        key = f"{namespace}/{args.pod}"
        ring = await api.extender(client, where, "v1/decisions", query={"pod": key})
        answer["decisions"] = ring.get("decisions", [])
        return answer, lambda a: render.why_text(a, a["decisions"])


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        body, table = asyncio.run(_run(args))
    except api.ConfigError as exc:
        return fail(PROG, str(exc))
    except api.PluginError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(body, indent=2))
    elif args.output == "yaml":
        print(yaml.safe_dump(body, sort_keys=False), end="")
    else:
        print("\n".join(table(body)))
    return 0
