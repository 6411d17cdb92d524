"""The scheduler wrapper counts what APScheduler does with our jobs, on a real event loop."""

from __future__ import annotations

import asyncio

import pytest

from exporter.daemon.scheduler import JobScheduler, Schedule
from tests.support.wait import wait_for


async def test_runs_errors_and_skipped_runs_are_counted() -> None:
    jobs = JobScheduler()
    jobs.start()
    try:
        ran = asyncio.Event()

        async def fine() -> None:
            ran.set()

        async def broken() -> None:
            raise RuntimeError("a bug")

        async def slow() -> None:
            await asyncio.sleep(0.35)

        jobs.put("fine", fine, Schedule(interval_s=0.05), run_now=True)
        jobs.put("broken", broken, Schedule(interval_s=0.05), run_now=True)
        jobs.put("slow", slow, Schedule(interval_s=0.1), run_now=True)
        await asyncio.wait_for(ran.wait(), 2)
        await wait_for(
            lambda: (
                jobs.counts["fine"]["ran"] >= 2
                and jobs.counts["broken"]["failed"] >= 1
                and jobs.counts["slow"]["skipped"] >= 1
            ),
            timeout=5,
        )
        assert jobs.counts["fine"]["ran"] >= 2
        assert (
            jobs.counts["broken"]["failed"] >= 1
            and jobs.counts["broken"]["failed"] == jobs.counts["broken"]["ran"]
        )
        assert jobs.counts["slow"]["skipped"] >= 1  # max_instances=1: never stacked on itself
    finally:
        jobs.shutdown()


async def test_jobs_are_replaced_and_removed_by_id() -> None:
    jobs = JobScheduler()
    jobs.start()
    try:

        async def job() -> None:
            return None

        jobs.put("a", job, Schedule(interval_s=60))
        jobs.put("b", job, Schedule(cron="*/5 * * * *"))
        jobs.put("a", job, Schedule(interval_s=30, jitter_s=5))
        assert jobs.job_ids() == ["a", "b"]
        assert jobs.keep_only({"b"}) == ["a"]
        assert jobs.job_ids() == ["b"]
    finally:
        jobs.shutdown()


def test_a_schedule_needs_an_interval_or_cron() -> None:
    with pytest.raises(ValueError, match="needs an interval > 0 or a cron line"):
        Schedule().trigger()
