"""What the daemon puts on its scheduler: one probe job per (target, module), one scrape job per engine or
gateway, one job per scheduled capacity search or profile; and probes run on demand.

``apply`` brings the scheduler in line with a config (which jobs, when, and which a reload leaves alone
is ``daemon.planned_jobs``): jobs are added, replaced or removed by id. Probes and scrapes run as
tracked tasks (``daemon.running_jobs``), so a shutdown can let them finish within a grace period and
then cancel the rest.

Scrapes and probes run apart in time: parsing an engine's page holds the event loop for milliseconds,
and a probe reading its stream meanwhile stamps its tokens late (with both started at once on the same
interval, 42 of 303 probe requests were flagged unreliable, 1 of 87 with no scrape). A scrape waits
until no probe is in flight (at most ``SCRAPE_WAIT_S``), and a probe until no scrape is (at most
``PROBE_WAIT_S``, for a scrape takes milliseconds); either wait is bounded, so neither starves.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence

import aiohttp
import numpy as np

from exporter.daemon.job_host import ENGINE_SCRAPE_TIMEOUT_S, DaemonJobEnvironment
from exporter.daemon.planned_jobs import ProbeWork, ScheduledWork, ScrapeWork, Work, planned_jobs
from exporter.daemon.running_jobs import RunningJobs
from exporter.daemon.scheduler import JobFunction, JobScheduler
from exporter.daemon.target_pool import TargetPool
from exporter.engine.catalogue import ENGINE_CATALOGUE, GATEWAY_CATALOGUE
from exporter.engine.scrape import Page, ScrapeResult, scrape
from exporter.evaluation import EvaluationSpec
from exporter.exposition.result_store import ResultStore
from exporter.exposition.self_metrics import SelfMetrics
from exporter.jobs.manager import JobConflictError
from exporter.settings import Config
from exporter.settings.model import EngineMetrics
from exporter.streams.result import ProbeRefusedError, ProbeResult, ProbeRun

LOG = logging.getLogger(__name__)
SCRAPE_WAIT_S = 5.0  # a scrape waits at most this (and half its interval) for the probes to end
PROBE_WAIT_S = 1.0  # a probe waits at most this for the scrapes in flight


def outcome_recorder(metrics: SelfMetrics) -> Callable[[str, str], None]:
    """The scheduler's ``on_outcome``: each job's outcome counted in the self-metrics."""

    def record(job_id: str, outcome: str) -> None:
        count = {
            "ran": metrics.job_ran,
            "failed": metrics.job_failed,
            "misfired": metrics.job_misfired,
            "skipped": metrics.job_was_skipped,
        }[outcome]
        count(job_id)

    return record


def _configured(config: Config, target: str, module: str) -> bool:
    """Whether ``config`` still probes ``module`` on ``target``."""
    return any(t.name == target and m.name == module for t, m in config.probes())


class ScrapesInFlight:
    """The engine and gateway scrapes in flight, for a probe to wait until none is."""

    def __init__(self) -> None:
        self._count = 0
        self._done = asyncio.Event()
        self._done.set()

    @contextlib.contextmanager
    def scraping(self) -> Iterator[None]:
        """One scrape in flight for the block."""
        self._count += 1
        self._done.clear()
        try:
            yield
        finally:
            self._count -= 1
            if not self._count:
                self._done.set()

    async def wait_none(self, limit_s: float) -> None:
        """Until no scrape is in flight, or ``limit_s`` has passed."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._done.wait(), limit_s)


async def scrape_source(
    session: aiohttp.ClientSession, source: EngineMetrics, *, gateway: bool
) -> ScrapeResult:
    """One scrape of an engine's ``/metrics`` (or, with ``gateway``, a gateway's), within its interval."""
    catalogue = GATEWAY_CATALOGUE if gateway else ENGINE_CATALOGUE
    page = Page(source.url, source.kind, source.model, catalogue, source.headers())
    return await scrape(session, page, min(source.interval_s, ENGINE_SCRAPE_TIMEOUT_S))


def scheduled_job(env: DaemonJobEnvironment, metrics: SelfMetrics, work: ScheduledWork) -> JobFunction:
    """The job ``jobs.schedules`` names ``work.name``: submitted to the job manager, and waited for."""

    async def run() -> None:
        schedule = next((s for s in env.config.jobs.schedules if s.name == work.name), None)
        if schedule is None:
            return
        manager = env.job_manager
        try:
            record = manager.submit(schedule.kind, schedule.params, schedule.params_dict, "schedule")
        except JobConflictError as exc:
            LOG.warning("scheduled job %s skipped: %s", work.name, exc)
            metrics.job_was_skipped(work.job_id)
            return
        await manager.wait(record.id)

    return run


class ProbeJobs:
    """The scheduled probes, scrapes and jobs of the config in force, and on-demand probes."""

    def __init__(
        self,
        scheduler: JobScheduler,
        pool: TargetPool,
        env: DaemonJobEnvironment,
        store: ResultStore,
        metrics: SelfMetrics,
        *,
        rng: np.random.Generator,
        on_results: Callable[[Sequence[ProbeResult]], None] | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._pool = pool
        # The config in force (asked at every run: a reload replaces it), the targets a job runs on, their
        # deadlines, the job manager and the scrape session.
        self._env = env
        self._store = store
        self._metrics = metrics
        self._rng = rng
        self._on_results = on_results  # every probe run's results (the traffic observer compares them)
        self._running = RunningJobs()
        self.scrapes_apart = True  # scrapes and probes wait for each other (a benchmark turns it off)
        self._scrapes = ScrapesInFlight()

    # -- scheduling ---------------------------------------------------------------------------------

    def apply(self, old: Config, config: Config) -> None:
        """Schedule ``config``'s jobs (``old`` was in force until now; the same object at start-up),
        remove the others, and let the store keep only the series ``config`` still has."""
        planned = planned_jobs(old, config, self._scheduler.job_ids())
        for job in planned:
            if job.put:
                self._scheduler.put(job.work.job_id, self._job(job.work), job.schedule, run_now=job.run_now)
                self._metrics.track_job(job.work.job_id)
        for job_id in self._scheduler.keep_only({job.work.job_id for job in planned}):
            self._metrics.forget_job(job_id)
        for target in config.targets:
            if target.engine_metrics is not None:
                self._metrics.track_target(target.name)
            if target.calibrates_prompts:
                self._metrics.track_calibration(target.name)
        self._store.retain(
            [(t.name, m.name) for t, m in config.probes()],
            [t.name for t in config.targets],
            [t.name for t in config.targets if t.gateway_metrics is not None],
        )

    def _job(self, work: Work) -> JobFunction:
        if isinstance(work, ProbeWork):
            return self.probe_job(work.target, work.module)
        if isinstance(work, ScrapeWork):
            return self._scrape_job(work.target, gateway=work.gateway)
        return scheduled_job(self._env, self._metrics, work)

    # -- probing ------------------------------------------------------------------------------------

    async def probe_now(self, target_name: str, module_name: str, *, on_demand: bool = True) -> ProbeRun:
        """Run one probe of ``module`` against ``target`` within the target's budget; not stored.

        On-demand probes (``/probe``) run one at a time per (target, module); scheduled ones never stack
        on themselves either (the scheduler's ``max_instances=1``), so the two kinds are tracked apart.
        """
        config = self._env.config
        target, module = config.target(target_name), config.module(module_name)
        if target.name in self._env.paused:
            raise ProbeRefusedError(f"a job runs on {target.name}; its probes wait until it ends", "paused")
        if self.scrapes_apart:
            await self._scrapes.wait_none(PROBE_WAIT_S)
        run = await self._pool.probe(target, module, self._rng, on_demand=on_demand)
        if self._on_results is not None:
            self._on_results(run.results)
        return run

    def probe_job(self, target: str, module: str) -> JobFunction:
        """The scheduled probe of (``target``, ``module``): one run, its results into the store."""
        job_id = ProbeWork(target, module).job_id

        @self._running.tracked
        async def run() -> None:
            if target in self._env.paused:
                LOG.info("probe %s/%s skipped: a job runs on the target", target, module)
                self._metrics.job_was_skipped(job_id)
                return
            try:
                probe = await self.probe_now(target, module, on_demand=False)
            except ProbeRefusedError as exc:
                # A back-off was logged at WARNING with its cause when it began (daemon.target_health); one line
                # per skipped run would bury it.
                LOG.debug("probe %s/%s skipped: %s", target, module, exc)
                self._metrics.job_was_skipped(job_id)
                return
            self._store_run(target, module, probe)

        return run

    def _store_run(self, target: str, module: str, probe: ProbeRun) -> None:
        """Add a scheduled probe's results to the store, with the target's deadlines and SLO."""
        config = self._env.config
        if not _configured(config, target, module):
            # A reload removed the target or module while the probe ran: its series went with it, and
            # storing the results would bring them back.
            LOG.info("probe %s/%s ended after a reload removed it; its results are dropped", target, module)
            return
        spec = EvaluationSpec.of(config.slo_for(target), deadlines=self._env.deadline_policy(target))
        self._store.add(target, module, probe.results, spec)

    def _scrape_job(self, target_name: str, *, gateway: bool = False) -> JobFunction:
        """Scrape the target's engine (or, with ``gateway``, its gateway) ``/metrics`` into the store."""

        @self._running.tracked
        async def run() -> None:
            target = self._env.config.target(target_name)
            source = target.gateway_metrics if gateway else target.engine_metrics
            session = self._env.scrape_session()
            if source is None or session is None:
                return
            if self.scrapes_apart:
                await self._pool.wait_none_probing(min(SCRAPE_WAIT_S, source.interval_s / 2))
            with self._scrapes.scraping():
                result = await scrape_source(session, source, gateway=gateway)
            if gateway:
                # Its health is fluidity_gateway_scrape_success; the engine scrape counters stay the engine's.
                self._store.add_gateway_scrape(target.name, result)
            else:
                self._store.add_engine_scrape(target.name, result)
                self._metrics.engine_scraped(target.name, result)

        return run

    # -- shutdown -----------------------------------------------------------------------------------

    def stop_scheduling(self) -> None:
        """Start no job from now on; the ones the shutdown cancels later end quietly."""
        self._running.stop()
        self._scheduler.shutdown()

    async def finish_running(self, grace_s: float) -> None:
        """Give in-flight jobs ``grace_s`` to finish, then cancel the rest and wait for them."""
        await self._running.finish(grace_s)
