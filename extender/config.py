"""The extender's settings: what the verdict needs, and what the server and report source need."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from mco.settings import LogSettings
from mco.webconfig import WebSettings
from reporter.schema import MAX_CLOCK_SKEW

DEFAULT_PORT = 9848
DEFAULT_LISTEN = f":{DEFAULT_PORT}"
DEFAULT_MAX_BODY = 64 << 20  # Volcano sends multi-MB bodies; aiohttp's own default is 1 MiB
# Body bytes held at once by one process, all connections together: two bodies of the largest
# size, well under the chart's 512Mi limit with the report, the verdict tables and a decode.
DEFAULT_MAX_BODY_MEMORY = 128 << 20
# The decisions ring (/v1/decisions): 512 pods x 8 decisions x 16 nodes hold ~21 MiB with usual
# names, ~48 MiB with the longest; this bound keeps the worst case in the chart's 512Mi too.
DEFAULT_DECISIONS_MEMORY = 32 << 20
SCHEDULER_AUTH = ("none", "client-cert")
KATA_NODE_LABEL = "katacontainers.io/kata-runtime"

# How far ahead of this clock a sample time or heartbeat may lie and still be believed: clocks
# of nodes, reporter and extender differ by a little; data dated further ahead is stale (it
# would otherwise stay fresh until that time, year 9999 included). The reporter's own rule for
# what it writes as live, so both ends of the report agree.
CLOCK_SKEW = MAX_CLOCK_SKEW

# Volcano predicate codes (api/types.go): 2 leaves the node a preemption candidate, 3 does not.
UNSCHEDULABLE = 2
UNSCHEDULABLE_AND_UNRESOLVABLE = 3


@dataclass(frozen=True, slots=True)
class VerdictConfig:
    """Everything the verdict function reads besides the report, the pod and the node."""

    stale_after: float = 30.0  # seconds; older entries count as missing
    neutral_score: float = 50.0  # 0-100, for missing and stale data
    fail_closed: bool = False  # missing/stale data rejects the node instead of passing it
    kata_globs: tuple[str, ...] = ("kata-*",)
    reject_code: int = UNSCHEDULABLE_AND_UNRESOLVABLE  # Volcano code for hard-constraint rejects
    volcano_weight: float = 1.0  # Volcano adds extender scores raw; this scales them
    clock_skew: float = CLOCK_SKEW  # seconds; data dated this far ahead or more is stale
    kata_pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.stale_after <= 0:
            raise ValueError("stale-after must be positive")
        if self.clock_skew <= 0:
            raise ValueError("clock skew allowance must be positive")
        if not 0 <= self.neutral_score <= 100:
            raise ValueError("neutral score must be within 0-100")
        if self.reject_code not in (UNSCHEDULABLE, UNSCHEDULABLE_AND_UNRESOLVABLE):
            raise ValueError(
                "reject code must be 2 (Unschedulable) or 3 (UnschedulableAndUnresolvable)"
            )
        if self.volcano_weight < 0:
            raise ValueError("volcano weight must not be negative")
        if not self.kata_globs or not all(self.kata_globs):
            raise ValueError("at least one non-empty Kata runtime-class glob is needed")
        pattern = "|".join(f"(?:{fnmatch.translate(g)})" for g in self.kata_globs)
        object.__setattr__(self, "kata_pattern", re.compile(pattern))


@dataclass(frozen=True, slots=True)
class SourceConfig:
    """Where reports come from: a file (reloaded on change) or the Kubernetes API."""

    report_file: str | None = None
    kubeconfig: str | None = None  # None: in-cluster config, else the default kubeconfig
    poll_interval: float = 0.5  # seconds between stat() calls on the report file
    watch_timeout: int = 300  # server-side watch timeout; the watch then resumes
    backoff_initial: float = 0.5
    backoff_max: float = 30.0


# Where Volcano placements come from (--volcano-placements): its allocate/deallocate calls,
# the tasks of each request's NodeInfos, or the tasks until the first such call arrives.
VOLCANO_PLACEMENTS = ("auto", "verbs", "tasks")

# Window 10s + scrape 1s + rule evaluation 1s + reporter interval 1s + ~2s for a pod to start:
# how long after its placement a pod shows in its node's report entry (docs/extender.md).
DEFAULT_RESERVATION_SPAN = 15.0


@dataclass(frozen=True, slots=True)
class ReservationConfig:
    """Reservations for pods placed since their node's data (``extender.reservation``)."""

    span: float = DEFAULT_RESERVATION_SPAN  # seconds from placement until the data shows a pod
    volcano_placements: str = "auto"
    watch_pods: bool = False  # kube-scheduler: watch pods bound to nodes

    def __post_init__(self) -> None:
        if self.span < 0:
            raise ValueError("reservation span must not be negative")
        if self.volcano_placements not in VOLCANO_PLACEMENTS:
            raise ValueError(f"volcano placements must be one of {', '.join(VOLCANO_PLACEMENTS)}")


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    verdict: VerdictConfig = field(default_factory=VerdictConfig)
    source: SourceConfig = field(default_factory=SourceConfig)
    reservation: ReservationConfig = field(default_factory=ReservationConfig)
    max_body_bytes: int = DEFAULT_MAX_BODY
    max_body_memory: int = DEFAULT_MAX_BODY_MEMORY
    decisions_memory: int = DEFAULT_DECISIONS_MEMORY
    # What the learned workload profiles weigh (extender.profiles); 0 turns them off.
    profile_weight: float = 0.5
    # Who may call the scheduler routes (/scheduler/*, /volcano/*): "none" (whoever reaches
    # the port) or "client-cert" (a client certificate the web config's client CA verified).
    scheduler_auth: str = "none"
    # --web.scheduler-listen-address's port: the scheduler routes answer only there, and the
    # main port keeps /metrics, the probes and /v1/* (None: every route on the main port).
    scheduler_port: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.profile_weight <= 1:
            raise ValueError("--profile-weight must be within 0-1")
        if self.scheduler_auth not in SCHEDULER_AUTH:
            raise ValueError(f"scheduler auth must be one of {', '.join(SCHEDULER_AUTH)}")


@dataclass(frozen=True, slots=True)
class ExtenderSettings:
    """``mco-extender``'s flags, parsed once: the app's config and how it is served."""

    web: WebSettings
    config: ExtenderConfig = field(default_factory=ExtenderConfig)
    workers: int = 1
    reuse_port: bool = False  # set for the worker processes of --workers
    log: LogSettings = field(default_factory=LogSettings)
    deprecated: tuple[str, ...] = ()
