"""A thin layer over APScheduler 3's ``AsyncIOScheduler``: jobs by id, counted outcomes.

Every job is an ``async def`` run on the app's event loop with ``max_instances=1`` (a slow probe run is
never stacked on itself), ``coalesce=True`` (missed runs collapse into one), a misfire grace time and
jitter. The scheduler's own events are turned into counts (runs, errors, misfires, runs skipped because
the previous one was still going) that the exporter exports about itself. A job's exception is a bug
of ours (target failures are results), so it is logged with its traceback and counted, never lost.

A run that hangs (a probe waiting up to its idle timeout) makes APScheduler warn at every interval that
it skipped the next run; those skips are counted, so its line is lowered to DEBUG and one line of ours
says when a job starts being skipped and one when its run ends, once per change of state.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_EXECUTED,
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    JobEvent,
    JobExecutionEvent,
)
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

LOG = logging.getLogger(__name__)
MISFIRE_GRACE_S = 30
# APScheduler 3's line for EVENT_JOB_MAX_INSTANCES, logged by its scheduler before the event.
SKIP_LINE = 'Execution of job "%s" skipped: maximum number of running instances reached (%d)'

JobFunction = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class Schedule:
    """When a job runs: every ``interval_s`` with up to ``jitter_s`` of jitter, or on a ``cron`` line."""

    interval_s: float | None = None
    jitter_s: float = 0.0
    cron: str | None = None

    def trigger(self) -> BaseTrigger:
        if self.cron is not None:
            return CronTrigger.from_crontab(self.cron, timezone="UTC")
        if self.interval_s is None or self.interval_s <= 0:
            raise ValueError(f"a schedule needs an interval > 0 or a cron line, got {self}")
        return IntervalTrigger(seconds=self.interval_s, jitter=self.jitter_s or None)


class SkipLineToDebug(logging.Filter):
    """Lowers APScheduler's "skipped: maximum number of running instances" line to DEBUG.

    Put on the ``apscheduler.scheduler`` logger, whose level was already checked at WARNING: the record
    goes on only when that logger would log DEBUG, since handlers at NOTSET would print it anyway.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != SKIP_LINE:
            return True
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)


_SKIP_FILTER = SkipLineToDebug()  # one instance: adding it again (another scheduler) changes nothing


class JobScheduler:
    """Owns the scheduler; jobs are added, replaced and removed by id; outcomes are counted by job id."""

    def __init__(self, on_outcome: Callable[[str, str], None] | None = None) -> None:
        self.scheduler = AsyncIOScheduler()
        self.counts: dict[str, Counter[str]] = {}
        self.on_outcome = on_outcome  # (job id, "ran" | "failed" | "misfired" | "skipped")
        self.skipping: dict[str, int] = {}  # job id -> runs skipped since its hanging run began
        logging.getLogger("apscheduler.scheduler").addFilter(_SKIP_FILTER)
        self.scheduler.add_listener(
            self._on_event, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES
        )

    @property
    def running(self) -> bool:
        return bool(self.scheduler.running)

    def start(self) -> None:
        """Start on the running event loop."""
        self.scheduler.start()

    def shutdown(self) -> None:
        """Stop scheduling; running jobs are not waited for here (the app cancels its own tasks)."""
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)

    def put(self, job_id: str, function: JobFunction, schedule: Schedule, *, run_now: bool = False) -> None:
        """Add the job, or replace the one with the same id (a reload)."""
        options: dict[str, Any] = {}
        if run_now:
            options["next_run_time"] = datetime.now(UTC)
        self.scheduler.add_job(
            function,
            schedule.trigger(),
            id=job_id,
            name=job_id,
            replace_existing=True,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=MISFIRE_GRACE_S,
            **options,
        )
        self.counts.setdefault(job_id, Counter())

    def keep_only(self, job_ids: set[str]) -> list[str]:
        """Remove every job not in ``job_ids``; returns the removed ids."""
        removed = [job.id for job in self.scheduler.get_jobs() if job.id not in job_ids]
        for job_id in removed:
            self.scheduler.remove_job(job_id)
            self.skipping.pop(job_id, None)
        return removed

    def job_ids(self) -> list[str]:
        return sorted(job.id for job in self.scheduler.get_jobs())

    def _on_event(self, event: JobEvent) -> None:
        outcomes = {
            EVENT_JOB_EXECUTED: ("ran",),
            EVENT_JOB_ERROR: ("ran", "failed"),
            EVENT_JOB_MISSED: ("misfired",),
            EVENT_JOB_MAX_INSTANCES: ("skipped",),
        }[event.code]
        if "failed" in outcomes:
            exception = event.exception if isinstance(event, JobExecutionEvent) else None
            LOG.error("job %s failed: a bug, not a target failure", event.job_id, exc_info=exception)
        if self.scheduler.get_job(event.job_id) is None:
            # A reload removed the job while this run went on: its counters were removed with it, and
            # counting the run would bring them back for good.
            return
        if "skipped" in outcomes or "ran" in outcomes:  # a misfire says nothing of the run in progress
            self._log_skipping(event.job_id, skipped="skipped" in outcomes)
        counts = self.counts.setdefault(event.job_id, Counter())
        for outcome in outcomes:
            counts[outcome] += 1
            if self.on_outcome is not None:
                self.on_outcome(event.job_id, outcome)

    def _log_skipping(self, job_id: str, *, skipped: bool) -> None:
        """One line when a job's runs start being skipped, one when its long run ends; none per skip."""
        if skipped:
            if job_id not in self.skipping:
                LOG.warning(
                    "job %s: its previous run is still going, so its runs are skipped (each counted in "
                    "fluidity_exporter_job_skipped_total) until that run ends",
                    job_id,
                )
            self.skipping[job_id] = self.skipping.get(job_id, 0) + 1
        elif job_id in self.skipping:
            LOG.info("job %s: its long run ended; %d runs were skipped", job_id, self.skipping.pop(job_id))
