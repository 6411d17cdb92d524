"""Helpers for the probe's tests: settings for a simulator, the simulator's request extensions, and the
wall clock's offset from the monotonic clock."""

from __future__ import annotations

import time
from typing import Any

from exporter.probe.socket_reads import OFFSET_BRACKET_S
from exporter.probe.target import TargetSettings, Timeouts
from exporter.sim import SimServer

# Short limits so that a hung test fails in seconds, not minutes.
TEST_TIMEOUTS = Timeouts(connect=2.0, ttft=5.0, idle=5.0, total=15.0)


def settings_for(server: SimServer, **overrides: Any) -> TargetSettings:
    """Settings pointing at ``server`` (model resolved through /v1/models unless given)."""
    fields: dict[str, Any] = {"base_url": server.url, "timeouts": TEST_TIMEOUTS, **overrides}
    return TargetSettings(**fields)


def script(**fields: Any) -> tuple[tuple[str, Any], ...]:
    """A request's ``extra_body`` that makes the simulator play ``fields`` as its timing script."""
    return (("sim", {"script": fields}),)


def fault(spec: Any) -> tuple[tuple[str, Any], ...]:
    """A request's ``extra_body`` that makes the simulator inject ``spec``."""
    return (("sim", {"fault": spec}),)


def wall_offset() -> float:
    """The wall clock minus the monotonic clock, from a wall-clock read between two monotonic reads close
    together (as ``SocketReads.clocks`` takes it): a preemption in between would shift the stamps."""
    for _ in range(10_000):
        before, wall, after = time.perf_counter(), time.time(), time.perf_counter()
        if after - before <= OFFSET_BRACKET_S:
            return wall - (before + after) / 2
    raise AssertionError("no clean clock reading in 10,000 tries")
