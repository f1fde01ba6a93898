"""Human tables for ``kubectl mco``; ``-o json|yaml`` prints the answers as they came.

``nodes_table`` is also the local stack's live view (scripts/local_stack.py), so the two
show the same thing."""

from __future__ import annotations

from typing import Any

DETECTION_COLUMNS = (
    ("cache_pollution", "cache"),
    ("io_congestion", "io"),
    ("memory_pressure", "memory"),
    ("cpu_contention", "cpu"),
)
MAX_DETAILS = 10  # nodes explained in full by `why` without --node (rejected ones first)


def _index(node: dict[str, Any], detection: str) -> str:
    state = node["detections"].get(detection)
    if state is None:
        return "-"
    return f"{state['index']:.2f}{'!' if state['triggered'] else ' '}"


def _num(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def nodes_table(body: dict[str, Any]) -> list[str]:
    """``GET /v1/nodes`` as one line per node (and its reasons)."""
    lines = [
        f"{'node':16} {'level':>6} {'score':>6}  "
        + " ".join(f"{label:>7}" for _, label in DETECTION_COLUMNS)
        + f"  {'sched':>5} {'fallback':>8} {'age':>6}"
    ]
    for node in body["nodes"]:
        age = "-" if node["ageSeconds"] is None else f"{node['ageSeconds']:.1f}s"
        stale = " stale" if node["stale"] else ""
        lines.append(
            f"{node['name'][:16]:16} {_num(node['level'], '.3f'):>6} "
            f"{node['verdict']['volcanoScore']:6.1f}  "
            + " ".join(f"{_index(node, d):>7}" for d, _ in DETECTION_COLUMNS)
            + f"  {'yes' if node['schedulable'] else 'NO':>5} "
            f"{'yes' if node['fallback'] else 'no':>8} {age:>6}{stale}"
        )
        if node["reasons"]:
            lines.append(f"{'':16} reasons: {', '.join(node['reasons'])}")
    return lines


NODES_LEGEND = "index per detection, ! = triggered (a signal reached its warn threshold)"


def report_summary(report: dict[str, Any]) -> list[str]:
    """The ``cluster`` report object's summary, heartbeat, config and conditions."""
    status = report.get("status") or {}
    summary = status.get("summary") or {}
    config = status.get("config") or {}
    layout = (report.get("metadata") or {}).get("labels", {}).get("mco.io/layout", "?")
    lines = [
        f"report:          {report.get('metadata', {}).get('name', '?')} (layout {layout})",
        f"last sync:       {status.get('lastSyncTime') or '-'}",
        f"nodes:           {summary.get('nodes', status.get('nodeCount', '-'))}",
        f"unschedulable:   {summary.get('unschedulable', '-')}",
        f"stale:           {summary.get('stale', '-')}",
        f"max level:       {_num(summary.get('maxLevel'), '.3f')}",
        f"min score:       {_num(summary.get('minScore'), '.1f')}",
        f"rule generation: {status.get('ruleConfigGeneration', '-')}",
    ]
    if config:
        policies = ", ".join(p["name"] for p in config.get("policies", [])) or "-"
        lines += [
            f"config:          generation {config.get('generation', '-')}, staleAfter "
            f"{config.get('staleAfter')}, neutralScore {config.get('neutralScore')}",
            f"policies:        {policies}",
        ]
    for c in status.get("conditions", []):
        why = f" {c.get('reason', '')}: {c.get('message', '')}".rstrip(": ")
        lines.append(f"condition:       {c['type']}={c['status']}{why}")
    return lines


def _verdict_line(node: dict[str, Any]) -> str:
    verdict = "pass" if node["passed"] else "REJECT"
    return f"{node['name'][:24]:24} {verdict:6} {node['reason']:16} {node['score']:6.1f}"


def _details(node: dict[str, Any]) -> list[str]:
    out = [f"node {node['name']}: {'passes' if node['passed'] else 'rejected'} ({node['reason']})"]
    if node["message"]:
        out.append(f"  message:     {node['message']}")
    why = node["explanation"]
    if why is None:
        out.append("  no interference report for this node")
        return out
    data = why["data"]
    out.append(
        f"  data:        sampled {data['sampleTime']}, age {_num(data['ageSeconds'], '.1f')}s"
        f" (stale after {data['staleAfterSeconds']:g}s){' STALE' if data['stale'] else ''}"
    )
    psi = " (memory judged without PSI)" if why["path"]["psiFallback"] else ""
    out.append(f"  path:        {why['path']['taken']}{psi}")
    for label, d in why["detections"].items():
        if d["index"] is None:
            continue
        mark = "triggered" if d["triggered"] else "quiet"
        out.append(f"  {label:16} index {d['index']:.3f} x weight {d['weight']:g} ({mark})")
        for key, s in d["signals"].items():
            if s["value"] is None:
                continue
            beyond = "  beyond warn" if s["beyondWarn"] else ""
            out.append(
                f"    {key:28} {s['value']:<10.4g} warn {s['warn']:<8g} critical "
                f"{s['critical']:g}{beyond}"
            )
    level = why["level"]
    terms = " + ".join(f"{t['weight']:g}·{t['index']:.3f}" for t in level["terms"]) or "-"
    out.append(
        f"  level:       ({terms}) / {level['weightSum']:g} = {_num(level['computed'], '.3f')}"
        f"; reported {_num(level['reported'], '.3f')}, reserved {level['reserved']:.3g}, "
        f"used {_num(level['used'], '.3f')}"
    )
    reservation = why["reservation"]
    if reservation["pods"]:
        placed = ", ".join(f"{r['pod']} {r['amount']:g}" for r in reservation["pods"])
        out.append(f"  reservation: {reservation['reserved']:.3g} for pods placed since the "
                   f"data ({placed})")  # fmt: skip
    out += _profile_lines(why.get("profile"))
    score = why["score"]
    out.append(
        f"  score:       {score['score']:.1f} (policy weight {score['policyWeight']:g}, neutral "
        f"{score['neutral']:g}; kube {score['kubeScore']}, volcano {score['volcanoScore']:.1f})"
    )
    for label, c in why["hardConstraints"].items():
        state = "held" if c["held"] else "VIOLATED" if c["violated"] else "ok"
        out.append(
            f"  {label:16} {_num(c['value'], '.4g')} (limit {c['limit']:g}) {state}"
            + ("" if c["enforced"] else ", ignored by the policy")
        )
    kata = why["kata"]
    if kata["wanted"]:
        out.append(f"  kata:        {kata['runtimeClass']} wanted; node ready: {kata['ready']}")
    return out


def _profile_lines(profile: dict[str, Any] | None) -> list[str]:
    """The learned workload profiles' terms (an older extender sends none)."""
    if not profile or not profile["parts"]:
        return []
    known = "known" if profile["known"] else "no history: labels and policy decide"
    out = [
        f"  profiles:    workload {profile['workload'] or '-'} ({known}); predicted "
        f"{profile['predicted']:.3g}, inflicted {profile['inflicted']:.3g} "
        f"(weight {profile['weight']:g})"
    ]
    for part in profile["parts"]:
        does = "pollutes" if part["role"] == "aggressor" else "suffers from"
        out.append(
            f"    {part['workload']} x{part['pods']} {does} {part['resource']} "
            f"{part['value']:.3g} -> {part['product']:.3g}"
        )
    return out


def why_text(answer: dict[str, Any], decisions: list[dict[str, Any]] | None) -> list[str]:
    """``/v1/explain`` (and the pod's recent decisions) for a person."""
    pod = answer["pod"]
    config = answer["config"]
    lines = [
        f"pod {pod['pod'] or '(unnamed)'}: policy {pod['policy']['name']}"
        + (f", runtimeClassName {pod['runtimeClass']}" if pod["runtimeClass"] else ""),
        f"config: {config['source']} (generation {_num(config['generation'], 'd')}), "
        "thresholds from "
        f"{config['thresholdsSource']}, {'fail-closed' if config['failClosed'] else 'fail-open'}",
        "",
        f"{'node':24} {'verdict':6} {'reason':16} {'score':>6}",
    ]
    nodes = answer["nodes"]
    lines += [_verdict_line(n) for n in nodes]
    if answer.get("truncated"):
        lines.append("(more nodes are known than one answer explains; use --node)")
    shown = nodes if len(nodes) == 1 else [n for n in nodes if not n["passed"]][:MAX_DETAILS]
    for node in shown:
        lines += ["", *_details(node)]
    if decisions:
        lines += ["", "recent scheduler decisions (oldest first):"]
        for d in decisions:
            rejected = ", ".join(f"{x['node']}={x['reason']}" for x in d["listed"]
                                 if not x["passed"])  # fmt: skip
            lines.append(
                f"  {d['time']} {d['route']:20} {d['passed']}/{d['nodes']} passed"
                + (f"; rejected {rejected}" if rejected else "")
            )
    return lines
