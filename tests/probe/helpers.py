"""Helpers for the probe's tests: settings for a simulator and the simulator's request extensions."""

from __future__ import annotations

from typing import Any

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
