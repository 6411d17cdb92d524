"""Plans sent on an absolute schedule, in process and over worker processes, results in plan order."""

from __future__ import annotations

import asyncio

import pytest

from exporter.probe.client import ProbeClient
from exporter.probe.result import Outcome, ProbeResult, ttft
from exporter.probe.target import RequestSpec
from exporter.probe.workers import WorkerStats, run_plan, run_plan_in_workers
from exporter.settings.target import TargetSettings
from exporter.sim import SimServer
from tests.probe.helpers import script, settings_for

TTFT_S = 0.03


def plan(requests: int, spacing: float) -> list[tuple[float, RequestSpec]]:
    # Offsets deliberately out of order: results must still come back in plan order.
    offsets = [spacing * ((i * 7) % requests) for i in range(requests)]
    return [
        (
            offset,
            RequestSpec(
                prompt="hi", max_tokens=5, request_id=f"r{i}", extra_body=script(ttft=TTFT_S, gaps=0.01)
            ),
        )
        for i, offset in enumerate(offsets)
    ]


def check(results: list[ProbeResult], entries: list[tuple[float, RequestSpec]]) -> None:
    assert [r.extra["request_id"] for r in results] == [spec.request_id for _, spec in entries]
    assert all(r.outcome is Outcome.OK and r.output_tokens == 5 for r in results)
    start = results[0].scheduled_at - entries[0][0]  # type: ignore[operator]
    for result, (offset, _) in zip(results, entries, strict=True):
        assert result.scheduled_at == pytest.approx(start + offset, abs=1e-9)  # absolute schedule
        # Sane, not precise: two spawned workers and the simulator share this VM's two cores.
        assert result.send_overhead_s is not None and 0 <= result.send_overhead_s < 0.2
        measured = ttft(result)
        assert measured is not None and TTFT_S - 0.0005 <= measured < TTFT_S + 0.2


async def test_run_plan_in_process(sim: SimServer) -> None:
    entries = plan(12, 0.01)
    async with ProbeClient(settings_for(sim)) as client:
        results = await run_plan(client, entries)
    check(results, entries)


async def test_run_plan_in_worker_processes(sim: SimServer) -> None:
    entries = plan(12, 0.01)
    # The simulator serves from this loop, so the blocking call runs in a thread.
    stats: list[WorkerStats] = []
    results = await asyncio.to_thread(
        run_plan_in_workers, settings_for(sim), entries, 2, start_delay=0.3, stats=stats
    )
    check(results, entries)
    assert sorted(s.requests for s in stats) == [6, 6]
    assert all(0 < s.cpu_s < s.wall_s * 1.5 for s in stats)
    assert len({r.extra["request_id"] for r in results}) == 12


def test_workers_must_be_positive() -> None:
    with pytest.raises(ValueError, match="workers must be >= 1, got 0"):
        run_plan_in_workers(TargetSettings(base_url="http://x"), [], 0)
