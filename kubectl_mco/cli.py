"""``kubectl-mco`` (run as ``kubectl mco``): ``nodes``, ``why POD``, ``report``.

The extender is asked through the API server's service proxy, or at ``--extender-url`` (e.g.
``kubectl port-forward``), or not at all: with ``--report-file`` the extender's own app judges a
report file in this process. ``why`` still reads the pod from the cluster.

Exit codes: 0 done; 1 the cluster said no (a pod that is not there, a proxy refused, no
report, an extender that does not answer); 2 a bad flag or kubeconfig, with one line on stderr
as in every MCO binary.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
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
        "--extender-url",
        help="ask the extender at this URL instead of through the API server's service proxy "
        "(e.g. http://localhost:9848 with `kubectl -n mco port-forward svc/mco-extender 9848`)",
    )
    common.add_argument("--extender-ca-file", help="CA of the extender's certificate (https)")
    common.add_argument("--extender-cert-file", help="client certificate (https)")
    common.add_argument("--extender-key-file", help="the client certificate's key")
    common.add_argument(
        "--extender-insecure-skip-verify",
        action="store_true",
        help="do not verify the extender's certificate",
    )
    common.add_argument(
        "--extender-basic-auth-user", help="basic-auth user, where the extender requires one"
    )
    common.add_argument(
        "--extender-basic-auth-password-file", help="file holding the basic-auth password"
    )
    common.add_argument(
        "--report-file",
        help="judge from this report file (what `mco-reporter --output` writes) with the "
        "extender's own code, in this process, instead of asking a running extender",
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
        extender_url=None,
        extender_ca_file=None,
        extender_cert_file=None,
        extender_key_file=None,
        extender_insecure_skip_verify=False,
        extender_basic_auth_user=None,
        extender_basic_auth_password_file=None,
        report_file=None,
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


def _direct(args: argparse.Namespace) -> api.Direct | None:
    if args.extender_url is None:
        return None
    return api.Direct(
        args.extender_url,
        ca_file=args.extender_ca_file,
        cert_file=args.extender_cert_file,
        key_file=args.extender_key_file,
        insecure_skip_verify=args.extender_insecure_skip_verify,
        basic_auth_user=args.extender_basic_auth_user,
        basic_auth_password_file=args.extender_basic_auth_password_file,
    )


async def _run(args: argparse.Namespace) -> tuple[Any, Callable[[Any], list[str]]]:
    async with contextlib.AsyncExitStack() as stack:
        ask: api.Ask | None = None
        if args.report_file is not None:
            ask = await stack.enter_async_context(api.local_extender(Path(args.report_file)))
        elif (direct := _direct(args)) is not None:
            ask = await stack.enter_async_context(api.direct(direct))
        if args.command == "nodes" and ask is not None:  # no cluster needed
            body = await ask("v1/nodes", None, None)
            return body, lambda b: [*render.nodes_table(b), "", render.NODES_LEGEND]
        client = await stack.enter_async_context(await api.connect(args.kubeconfig, args.context))
        if ask is None:
            where = api.Extender(
                args.extender_namespace,
                args.extender_service,
                args.extender_port,
                args.extender_scheme,
            )
            ask = api.through_proxy(client, where)
        if args.command == "nodes":
            body = await ask("v1/nodes", None, None)
            return body, lambda b: [*render.nodes_table(b), "", render.NODES_LEGEND]
        if args.command == "report":
            found = await api.report(client)
            return found, render.report_summary
        namespace = args.namespace or _namespace(args.kubeconfig, args.context)
        pod = await api.pod(client, namespace, args.pod)
        request: dict[str, Any] = {"pod": pod}
        if args.node:
            request["nodes"] = args.node
        answer = await ask("v1/explain", request, None)
        key = f"{namespace}/{args.pod}"
        ring = await ask("v1/decisions", None, {"pod": key})
        answer["decisions"] = ring.get("decisions", [])
        return answer, lambda a: render.why_text(a, a["decisions"])


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Flags that go together, or not (exit 2 with the reason)."""
    if args.report_file is not None and args.extender_url is not None:
        parser.error("--report-file and --extender-url name two different extenders: give one")
    if args.command == "report" and (args.report_file or args.extender_url):
        parser.error("--report-file and --extender-url apply to nodes and why")
    try:
        direct = _direct(args)
        if direct is not None:
            direct.validate()
    except ValueError as exc:
        parser.error(str(exc))


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    _check(parser, args)
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
