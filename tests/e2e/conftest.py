"""The whole local stack on real interference. Each test gets a fresh stack on free ports and
must leave no process behind (checked through the marker every child of the stack carries)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scripts.local_stack import MARKER_ENV, LocalStack, Ports, StackSettings


def stack_processes() -> dict[int, str]:
    """PID -> marker of every process whose environment carries ``MCO_LOCAL_STACK``."""
    prefix = f"{MARKER_ENV}=".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                variables = f.read().split(b"\0")
        except OSError:
            continue  # gone, or a kernel thread
        for var in variables:
            if var.startswith(prefix):
                found[int(entry)] = var[len(prefix) :].decode()
    return found


def processes_with_marker(marker: str) -> list[int]:
    return [pid for pid, m in stack_processes().items() if m == marker]


def short_stale_config(tmp_path: Path) -> Path:
    """The default model with report.staleAfter 10s, so staleness shows within a test."""
    path = tmp_path / "detectionruleconfig.yaml"
    path.write_text(
        "apiVersion: mco.io/v1alpha1\nkind: DetectionRuleConfig\nmetadata:\n  name: default\n"
        "spec:\n  report:\n    staleAfter: 10s\n"
    )
    return path


@pytest.fixture
def stack_factory(tmp_path: Path) -> Iterator[Callable[..., LocalStack]]:
    stacks: list[LocalStack] = []

    def make(rule_config: Path | None = None) -> LocalStack:
        settings = StackSettings(
            workdir=tmp_path / "stack", ports=Ports(0, 0, 0, 0), rule_config=rule_config
        )
        stack = LocalStack(settings)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.stop()
        assert processes_with_marker(stack.marker) == [], "processes left running"
