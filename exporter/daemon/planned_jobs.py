"""What goes on the scheduler for a config (pure): each job's id, what it runs, when, and whether an
``apply`` puts it again.

One probe job per (target, module) on the module's schedule, one scrape job per engine or gateway on its
interval, one job per ``jobs.schedules`` entry on its cron line. A probe job is put again only when a
reload changed its target, module or SLO, or it is not scheduled yet: a reload that leaves it alone
keeps its timing. ``ProbeJobs.apply`` turns each plan into a job function on the scheduler.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from exporter.daemon.config_facts import probe_changed
from exporter.daemon.scheduler import Schedule
from exporter.settings import Config


@dataclass(frozen=True)
class ProbeWork:
    """A scheduled probe of ``module`` against ``target``, its results into the store."""

    target: str
    module: str

    @property
    def job_id(self) -> str:
        return f"probe:{self.target}:{self.module}"


@dataclass(frozen=True)
class ScrapeWork:
    """A scrape of ``target``'s engine ``/metrics`` (or, with ``gateway``, its gateway's)."""

    target: str
    gateway: bool = False

    @property
    def job_id(self) -> str:
        return f"{'gateway' if self.gateway else 'engine'}:{self.target}"


@dataclass(frozen=True)
class ScheduledWork:
    """The capacity search or profile ``jobs.schedules`` names ``name``, submitted to the job manager."""

    name: str

    @property
    def job_id(self) -> str:
        return f"job:{self.name}"


Work = ProbeWork | ScrapeWork | ScheduledWork


@dataclass(frozen=True)
class PlannedJob:
    """One job of a config: what it runs and when; ``put`` False leaves the scheduled one as it is."""

    work: Work
    schedule: Schedule
    run_now: bool = False  # its first run as soon as it is put, not one interval later
    put: bool = True


def planned_jobs(old: Config, config: Config, scheduled: Collection[str]) -> list[PlannedJob]:
    """Every job ``config`` schedules, ``old`` having been in force until now (the same object at
    start-up) with the jobs ``scheduled`` by id."""
    return [*_probes(old, config, scheduled), *_scrapes(config), *_schedules(config)]


def _probes(old: Config, config: Config, scheduled: Collection[str]) -> list[PlannedJob]:
    planned = []
    for target, module in config.probes():
        work = ProbeWork(target.name, module.name)
        changed = old is config or probe_changed(old, config, target, module)
        every = module.schedule
        schedule = Schedule(every.interval_s, every.jitter_s, every.cron)
        planned.append(PlannedJob(work, schedule, run_now=True, put=changed or work.job_id not in scheduled))
    return planned


def _scrapes(config: Config) -> list[PlannedJob]:
    planned = []
    for target in config.targets:
        if target.engine_metrics is not None:
            schedule = Schedule(target.engine_metrics.interval_s)
            planned.append(PlannedJob(ScrapeWork(target.name), schedule, run_now=True))
        if target.gateway_metrics is not None:
            schedule = Schedule(target.gateway_metrics.interval_s)
            planned.append(PlannedJob(ScrapeWork(target.name, gateway=True), schedule, run_now=True))
    return planned


def _schedules(config: Config) -> list[PlannedJob]:
    return [PlannedJob(ScheduledWork(s.name), Schedule(cron=s.cron)) for s in config.jobs.schedules]
