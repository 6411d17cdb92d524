"""The scheduler wrapper counts what APScheduler does with our jobs, on a real event loop."""

from __future__ import annotations

import asyncio
import logging

import pytest

from exporter.daemon.scheduler import SKIP_LINE, JobScheduler, Schedule, SkipLineToDebug
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


async def test_a_hanging_run_logs_one_line_while_every_skip_is_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """APScheduler warns at every skipped run; a run hanging for several intervals gives one line of ours."""
    caplog.set_level(logging.DEBUG)
    # As `run` sets it unless --log-level=debug (caplog.set_level would raise its handler's level too).
    apscheduler = logging.getLogger("apscheduler")
    before = apscheduler.level
    apscheduler.setLevel(logging.WARNING)
    jobs = JobScheduler()
    jobs.start()
    release = asyncio.Event()
    try:

        async def hangs() -> None:
            await release.wait()

        jobs.put("probe:t:m", hangs, Schedule(interval_s=0.05), run_now=True)
        await wait_for(lambda: jobs.counts["probe:t:m"]["skipped"] >= 5, timeout=5)
        loud = [r for r in caplog.records if r.levelno >= logging.INFO and "probe:t:m" in r.getMessage()]
        assert [r.getMessage() for r in loud] == [
            "job probe:t:m: its previous run is still going, so its runs are skipped (each counted in "
            "fluidity_exporter_job_skipped_total) until that run ends"
        ]
        release.set()
        await wait_for(lambda: jobs.counts["probe:t:m"]["ran"] >= 1, timeout=5)
        skipped = jobs.counts["probe:t:m"]["skipped"]
        assert [r.getMessage() for r in caplog.records if r.name.startswith("apscheduler")] == []
        ended = [r for r in caplog.records if "its long run ended" in r.getMessage()]
        assert [(r.levelno, r.getMessage()) for r in ended] == [
            (logging.INFO, f"job probe:t:m: its long run ended; {skipped} runs were skipped")
        ]
    finally:
        jobs.shutdown()
        apscheduler.setLevel(before)


def test_the_lowered_skip_line_is_dropped_unless_apscheduler_logs_debug() -> None:
    """In production apscheduler logs at WARNING: the skip line must not reach a NOTSET handler."""
    logger = logging.getLogger("apscheduler.scheduler")
    before = logger.level
    record = logger.makeRecord(logger.name, logging.WARNING, __file__, 0, SKIP_LINE, ("job", 1), None)
    try:
        logger.setLevel(logging.WARNING)
        assert not SkipLineToDebug().filter(record) and record.levelno == logging.DEBUG
        logger.setLevel(logging.DEBUG)
        assert SkipLineToDebug().filter(record)
        other = logger.makeRecord(logger.name, logging.WARNING, __file__, 0, "Scheduler started", (), None)
        assert SkipLineToDebug().filter(other) and other.levelno == logging.WARNING
    finally:
        logger.setLevel(before)
