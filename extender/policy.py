"""Which workload-class policy applies to a pod, and the config in force that says so.

The extender starts with its flags (``--stale-after``, ``--neutral-score``) and the shipped
policies (``mco.policy.DEFAULT_POLICIES``, what a DetectionRuleConfig without ``policies``
holds); once the report's ``cluster`` object carries ``status.config`` (copied by the reporter
from the accepted DetectionRuleConfig), that is followed instead, in file mode and watch mode
alike. A rejected DetectionRuleConfig never reaches the report, so it never reaches here.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import Final

from extender.config import VerdictConfig
from mco.policy import DEFAULT_POLICIES, NO_POLICY, Policy, check_policy_names, policy_for
from reporter.schema import ReportConfig

log = logging.getLogger("mco.extender.policy")

FLAGS: Final = "flags"  # where the config in force came from, before a report carried one
REPORT: Final = "report"


class PolicySet:
    """The policies in force, first match wins (``mco.policy.policy_for``)."""

    __slots__ = ("policies",)

    def __init__(self, policies: Sequence[Policy] = DEFAULT_POLICIES) -> None:
        check_policy_names(policies)  # the verdict tables are keyed by policy name
        self.policies = tuple(policies)

    def policy_for(self, labels: Mapping[str, str] | None) -> Policy:
        """The policy of a pod with ``labels`` (None: a pod without labels)."""
        return policy_for(self.policies, labels or {})

    def __len__(self) -> int:
        return len(self.policies)


@dataclasses.dataclass(frozen=True, slots=True)
class LiveConfig:
    """The verdict configuration and policies in force, and where they came from."""

    verdict: VerdictConfig
    policies: PolicySet
    source: str = FLAGS
    generation: int | None = None  # of the DetectionRuleConfig, when the report says


def from_report(base: VerdictConfig, config: ReportConfig) -> LiveConfig | None:
    """``base`` (the flags) with the report's settings, or None when they do not make a
    verdict configuration (then the config in force stays, and the reason is logged)."""
    try:
        verdict = dataclasses.replace(
            base,
            stale_after=config.stale_after_seconds(),
            neutral_score=config.neutral_score,
        )
        policies = PolicySet(config.policies)
    except ValueError as exc:
        log.error("status.config of the report ignored", extra={"err": str(exc)})
        return None
    return LiveConfig(verdict, policies, REPORT, config.generation)


__all__ = ["NO_POLICY", "LiveConfig", "PolicySet", "from_report"]
