"""On-demand probes end on their own deadline, or on the shorter one a shutdown gives them."""

from __future__ import annotations

import asyncio

import pytest

from exporter.daemon.on_demand import OnDemandDeadlines
from exporter.streams.result import ProbeCutError, ProbeRun


async def hanging() -> ProbeRun:
    await asyncio.sleep(60)
    raise AssertionError("not cut")


async def test_a_probe_past_its_own_deadline_times_out() -> None:
    deadlines = OnDemandDeadlines(grace_s=10.0)
    with pytest.raises(TimeoutError) as ended:
        await deadlines.run(hanging, timeout_s=0.05)
    assert type(ended.value) is TimeoutError and not deadlines.in_flight


async def test_a_shutdown_cuts_the_probes_in_flight_and_those_after_it_to_the_grace() -> None:
    deadlines = OnDemandDeadlines(grace_s=0.05)
    probe = asyncio.ensure_future(deadlines.run(hanging, timeout_s=60.0))
    while not deadlines.in_flight:
        await asyncio.sleep(0.001)
    deadlines.cut()
    with pytest.raises(ProbeCutError):
        await asyncio.wait_for(probe, 5.0)
    with pytest.raises(ProbeCutError):  # one that starts once the shutdown began
        await asyncio.wait_for(deadlines.run(hanging, timeout_s=60.0), 5.0)
    assert deadlines.shutting_down and not deadlines.in_flight


async def test_a_deadline_sooner_than_the_grace_is_its_own() -> None:
    deadlines = OnDemandDeadlines(grace_s=30.0)
    deadlines.cut()
    with pytest.raises(TimeoutError) as ended:
        await deadlines.run(hanging, timeout_s=0.05)
    assert type(ended.value) is TimeoutError
