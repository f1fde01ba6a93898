"""The reporter's own metrics on ``/metrics`` (default :9849, secured by ``--web.config.file``).

``mco_reporter_last_sync_timestamp_seconds`` feeds the MCOReportStale alert; it only moves on a
successful sync by the leader, so a stuck or partitioned reporter shows up there.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from mco import selfmetrics, webserver
from mco.asynciotasks import AsyncioTasks
from mco.webconfig import WebSettings
from reporter.sink import Medium, SinkResult


class ReporterMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        r.register(AsyncioTasks(selfmetrics.REPORTER_ASYNCIO_TASKS))
        self.cycle_seconds = Histogram(
            selfmetrics.REPORTER_CYCLE_DURATION,
            "Wall time of one reporter cycle: query, build, write.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )
        self.cycle_cpu = Counter(
            selfmetrics.REPORTER_CYCLE_CPU,
            "CPU time (user+system) the reporter process spent in cycles.",
            registry=r,
        )
        self.queries = Counter(
            selfmetrics.REPORTER_QUERIES, "PromQL queries sent to the source.", registry=r
        )
        self.answer_bytes = Counter(
            selfmetrics.REPORTER_ANSWER_BYTES, "Bytes of PromQL answers received.", registry=r
        )
        self.nodes = Gauge(selfmetrics.REPORTER_NODES, "Nodes in the report.", registry=r)
        self.stale_nodes = Gauge(
            selfmetrics.REPORTER_STALE_NODES,
            "Nodes whose data a reader judges stale now (older than staleAfter).",
            registry=r,
        )
        self.lagging_nodes = Gauge(
            selfmetrics.REPORTER_LAGGING_NODES,
            "Nodes without a fresh sample at the last sync (aging toward removal).",
            registry=r,
        )
        self.changed_nodes = Counter(
            selfmetrics.REPORTER_CHANGED_NODES,
            "Node entries rebuilt, added or removed (changes beyond the epsilon).",
            registry=r,
        )
        self.api_writes = Counter(
            selfmetrics.REPORTER_API_WRITES,
            "Write requests sent to the Kubernetes API, by verb.",
            ["verb"],
            registry=r,
        )
        self.api_bytes = Counter(
            selfmetrics.REPORTER_API_WRITE_BYTES,
            "Request body bytes sent to the Kubernetes API.",
            registry=r,
        )
        self.file_bytes = Counter(
            selfmetrics.REPORTER_FILE_WRITE_BYTES, "Bytes written to --output.", registry=r
        )
        self.errors = Counter(
            selfmetrics.REPORTER_ERRORS,
            "Errors by kind (source_*, api_*, file_write).",
            ["kind"],
            registry=r,
        )
        self.leader = Gauge(
            selfmetrics.REPORTER_LEADER,
            "1 while this replica holds the lease and writes.",
            registry=r,
        )
        self.last_sync = Gauge(
            selfmetrics.REPORTER_LAST_SYNC,
            "Unix time of the last cycle whose heartbeat was written (query and write succeeded).",
            registry=r,
        )
        self.layout = Gauge(
            selfmetrics.REPORTER_LAYOUT, "1 for the layout in use.", ["layout"], registry=r
        )
        self.object_bytes = Gauge(
            selfmetrics.REPORTER_LARGEST_OBJECT_BYTES,
            "Estimated JSON size of the largest report object.",
            registry=r,
        )
        self.object_over_limit = Gauge(
            selfmetrics.REPORTER_OBJECT_OVER_LIMIT,
            "1 while --layout cluster would write an object over --max-object-bytes (the API "
            "server refuses it: use --layout per-node or auto).",
            registry=r,
        )
        self.rule_config_mismatch = Gauge(
            selfmetrics.REPORTER_RULE_CONFIG_MISMATCH,
            "1 when the source's rules encode another DetectionRuleConfig than this reporter's.",
            registry=r,
        )
        self.source_up = Gauge(
            selfmetrics.REPORTER_SOURCE_UP,
            "1 when the PromQL source (a shard; its URL without credentials) answered the last "
            "cycle, 0 when it failed (its nodes age toward stale).",
            ["source"],
            registry=r,
        )
        self.source_nodes = Gauge(
            selfmetrics.REPORTER_SOURCE_NODES,
            "Nodes taken from the source's answer at its last successful cycle (a node two "
            "shards know counts for the one with the freshest sample).",
            ["source"],
            registry=r,
        )
        self.taints_added = Counter(
            selfmetrics.REPORTER_TAINTS_ADDED,
            "Nodes given MCO's NoSchedule taint (--taint-nodes).",
            registry=r,
        )
        self.taints_removed = Counter(
            selfmetrics.REPORTER_TAINTS_REMOVED,
            "Nodes whose MCO taint was removed: constraint cleared, data stale, node left the "
            "report.",
            registry=r,
        )
        self.taint_errors = Counter(
            selfmetrics.REPORTER_TAINT_ERRORS,
            "Failed Node list, read or patch calls of the taint mode, by kind.",
            ["kind"],
            registry=r,
        )
        self.tainted_nodes = Gauge(
            selfmetrics.REPORTER_TAINTED_NODES,
            "Nodes carrying MCO's taint, as this replica last saw them (0 when not leading).",
            registry=r,
        )
        self.taint_pending = Gauge(
            selfmetrics.REPORTER_TAINT_PENDING,
            "Taint changes due at the last cycle but held back by the rate limit or a back-off.",
            registry=r,
        )
        self.taint_held_back = Gauge(
            selfmetrics.REPORTER_TAINT_HELD_BACK,
            "Nodes with a held hard constraint left untainted at the last cycle: more would pass "
            "--taint-max-share of the Nodes.",
            registry=r,
        )
        self.tier_changes = Counter(
            selfmetrics.REPORTER_TIER_CHANGES,
            "Tier labels written (--tier-label-nodes), by the tier set (none: label removed).",
            ["tier"],
            registry=r,
        )
        self.tier_errors = Counter(
            selfmetrics.REPORTER_TIER_ERRORS,
            "Failed Node list, read or patch calls of the tier-label mode, by kind.",
            ["kind"],
            registry=r,
        )
        self.tier_nodes = Gauge(
            selfmetrics.REPORTER_TIER_NODES,
            "Nodes carrying each tier label, as this replica last saw them (0 when not leading).",
            ["tier"],
            registry=r,
        )
        self.tier_pending = Gauge(
            selfmetrics.REPORTER_TIER_PENDING,
            "Tier-label changes due at the last cycle but held back by the rate limit or a "
            "back-off.",
            registry=r,
        )
        for tier in ("low", "medium", "high", "none"):
            self.tier_changes.labels(tier)
            if tier != "none":
                self.tier_nodes.labels(tier)
        for kind in (
            "source_unreachable",
            "source_timeout",
            "source_error",
            "source_bad_answer",
            "source_too_large",
        ):
            self.errors.labels(kind)
        for verb in ("create", "patch", "delete"):
            self.api_writes.labels(verb)

    def wrote(self, medium: Medium, result: SinkResult) -> None:
        """What one sink write sent and found (every field of the ``SinkResult``)."""
        if medium == "api":
            for verb, count in result.writes.items():
                self.api_writes.labels(verb).inc(count)
            self.api_bytes.inc(result.bytes)
        else:
            self.file_bytes.inc(result.bytes)
        for kind in result.errors:
            self.errors.labels(f"{medium}_{kind}").inc()
        if result.layout:
            self.set_layout(result.layout)
        self.object_bytes.set(result.object_bytes)
        self.object_over_limit.set(1 if result.over_limit else 0)

    def set_layout(self, layout: str) -> None:
        for name in ("cluster", "per-node"):
            self.layout.labels(name).set(1 if name == layout else 0)

    def app(self) -> web.Application:
        async def metrics(_: web.Request) -> web.Response:
            return web.Response(
                body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
            )

        async def healthz(_: web.Request) -> web.Response:
            return web.Response(text="ok\n")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/healthz", healthz)
        return app


async def serve(metrics: ReporterMetrics, settings: WebSettings) -> web.AppRunner:
    """The self-metrics server, secured by ``--web.config.file`` like every MCO server."""
    return await webserver.start(metrics.app(), settings)
