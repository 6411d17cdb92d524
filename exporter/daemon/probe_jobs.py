"""What the daemon puts on its scheduler: one probe job per (target, module), one scrape job per engine or
gateway, one job per scheduled capacity search or profile; and probes run on demand.

``apply`` brings the scheduler in line with a config: jobs are added, replaced or removed by id, and a
probe job is replaced only when its target or module changed (a reload that leaves it alone keeps its
timing). Probes and scrapes run as tracked tasks, so a shutdown can let them finish within a grace
period and then cancel the rest.

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
from collections.abc import Callable, Sequence, Set

import numpy as np

from exporter.daemon.config_facts import probe_changed
from exporter.daemon.job_environment import ENGINE_SCRAPE_TIMEOUT_S, SessionSource
from exporter.daemon.scheduler import JobFunction, JobScheduler, Schedule
from exporter.daemon.targets import TargetPool
from exporter.engine.families import ENGINE_CATALOGUE, GATEWAY_CATALOGUE
from exporter.engine.scrape import scrape
from exporter.evaluation import DeadlinePolicy
from exporter.exposition.self_metrics import SelfMetrics
from exporter.exposition.store import ResultStore
from exporter.jobs.manager import JobConflictError, JobManager
from exporter.probe.result import ProbeRefusedError, ProbeResult, ProbeRun
from exporter.settings import Config

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


class ProbeJobs:
    """The scheduled probes, scrapes and jobs of the config in force, and on-demand probes."""

    def __init__(
        self,
        scheduler: JobScheduler,
        store: ResultStore,
        metrics: SelfMetrics,
        pool: TargetPool,
        *,
        config: Callable[[], Config],
        paused: Set[str],
        deadline_policy: Callable[[str], DeadlinePolicy],
        job_manager: JobManager,
        scrape_session: SessionSource,
        rng: np.random.Generator,
        on_results: Callable[[Sequence[ProbeResult]], None] | None = None,
    ) -> None:
        self._scheduler = scheduler
        self._store = store
        self._metrics = metrics
        self._pool = pool
        self._config = config  # asked at every run: a reload replaces it
        self._paused = paused  # targets a job runs on (the job environment's set, read here)
        self._deadline_policy = deadline_policy
        self._job_manager = job_manager
        self._scrape_session = scrape_session
        self._rng = rng
        self._on_results = on_results  # every probe run's results (the traffic observer compares them)
        self._running: set[asyncio.Task[object]] = set()
        self.scrapes_apart = True  # scrapes and probes wait for each other (a benchmark turns it off)
        self._scraping = 0  # scrapes in flight
        self._scrapes_done = asyncio.Event()
        self._scrapes_done.set()
        self._stopping = False  # set by stop_scheduling(): the jobs it cancels end quietly

    # -- scheduling ---------------------------------------------------------------------------------

    def apply(self, old: Config, config: Config) -> None:
        """Schedule ``config``'s jobs (``old`` was in force until now; the same object at start-up),
        remove the others, and let the store keep only the series ``config`` still has."""
        wanted = self._put_probes(old, config) | self._put_scrapes(config) | self._put_schedules(config)
        for job_id in self._scheduler.keep_only(wanted):
            self._metrics.forget_job(job_id)
        for target in config.targets:
            if target.calibrates_prompts:
                self._metrics.track_calibration(target.name)
        self._store.retain(
            [(t.name, m.name) for t, m in config.probes()],
            [t.name for t in config.targets],
            [t.name for t in config.targets if t.gateway_metrics is not None],
        )

    def _put_probes(self, old: Config, config: Config) -> set[str]:
        wanted: set[str] = set()
        for target, module in config.probes():
            job_id = f"probe:{target.name}:{module.name}"
            wanted.add(job_id)
            changed = old is config or probe_changed(old, config, target, module)
            if changed or job_id not in self._scheduler.job_ids():
                schedule = Schedule(
                    module.schedule.interval_s, module.schedule.jitter_s, module.schedule.cron
                )
                self._scheduler.put(job_id, self.probe_job(target.name, module.name), schedule, run_now=True)
                self._metrics.track_job(job_id)
        return wanted

    def _put_scrapes(self, config: Config) -> set[str]:
        wanted: set[str] = set()
        for target in config.targets:
            if target.engine_metrics is not None:
                job_id = f"engine:{target.name}"
                wanted.add(job_id)
                schedule = Schedule(target.engine_metrics.interval_s)
                self._scheduler.put(job_id, self._scrape_job(target.name), schedule, run_now=True)
                self._metrics.track_job(job_id)
                self._metrics.track_target(target.name)
            if target.gateway_metrics is not None:
                job_id = f"gateway:{target.name}"
                wanted.add(job_id)
                schedule = Schedule(target.gateway_metrics.interval_s)
                self._scheduler.put(
                    job_id, self._scrape_job(target.name, gateway=True), schedule, run_now=True
                )
                self._metrics.track_job(job_id)
        return wanted

    def _put_schedules(self, config: Config) -> set[str]:
        wanted: set[str] = set()
        for scheduled in config.jobs.schedules:
            job_id = f"job:{scheduled.name}"
            wanted.add(job_id)
            self._scheduler.put(job_id, self._scheduled_job(scheduled.name), Schedule(cron=scheduled.cron))
            self._metrics.track_job(job_id)
        return wanted

    # -- probing ------------------------------------------------------------------------------------

    async def probe_now(self, target_name: str, module_name: str, *, on_demand: bool = True) -> ProbeRun:
        """Run one probe of ``module`` against ``target`` within the target's budget; not stored.

        On-demand probes (``/probe``) run one at a time per (target, module); scheduled ones never stack
        on themselves either (the scheduler's ``max_instances=1``), so the two kinds are tracked apart.
        """
        config = self._config()
        target, module = config.target(target_name), config.module(module_name)
        if target.name in self._paused:
            raise ProbeRefusedError(f"a job runs on {target.name}; its probes wait until it ends", "paused")
        if self.scrapes_apart:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._scrapes_done.wait(), PROBE_WAIT_S)
        run = await self._pool.probe(target, module, self._rng, on_demand=on_demand)
        if self._on_results is not None:
            self._on_results(run.results)
        return run

    def probe_job(self, target: str, module: str) -> JobFunction:
        """The scheduled probe of (``target``, ``module``): one run, its results into the store."""

        @self._tracked
        async def run() -> None:
            if target in self._paused:
                LOG.info("probe %s/%s skipped: a job runs on the target", target, module)
                self._metrics.job_was_skipped(f"probe:{target}:{module}")
                return
            try:
                probe = await self.probe_now(target, module, on_demand=False)
            except ProbeRefusedError as exc:
                # A back-off was logged at WARNING with its cause when it began (daemon.health); one line
                # per skipped run would bury it.
                LOG.debug("probe %s/%s skipped: %s", target, module, exc)
                self._metrics.job_was_skipped(f"probe:{target}:{module}")
                return
            config = self._config()
            if not _configured(config, target, module):
                # A reload removed the target or module while the probe ran: its series went with it,
                # and storing the results would bring them back.
                LOG.info(
                    "probe %s/%s ended after a reload removed it; its results are dropped", target, module
                )
                return
            slo = config.slo_for(target)
            self._store.add(
                target, module, probe.results, self._deadline_policy(target), slo.goodput, slos=slo.objectives
            )

        return run

    def _scrape_job(self, target_name: str, *, gateway: bool = False) -> JobFunction:
        """Scrape the target's engine (or, with ``gateway``, its gateway) ``/metrics`` into the store."""

        @self._tracked
        async def run() -> None:
            target = self._config().target(target_name)
            source = target.gateway_metrics if gateway else target.engine_metrics
            session = self._scrape_session()
            if source is None or session is None:
                return
            if self.scrapes_apart:
                await self._pool.wait_none_probing(min(SCRAPE_WAIT_S, source.interval_s / 2))
            self._scraping += 1
            self._scrapes_done.clear()
            try:
                result = await scrape(
                    session,
                    source.url,
                    min(source.interval_s, ENGINE_SCRAPE_TIMEOUT_S),
                    kind=source.kind,
                    model=source.model,
                    catalogue=GATEWAY_CATALOGUE if gateway else ENGINE_CATALOGUE,
                    headers=source.headers(),
                )
            finally:
                self._scraping -= 1
                if not self._scraping:
                    self._scrapes_done.set()
            if gateway:
                # Its health is fluidity_gateway_scrape_success; the engine scrape counters stay the engine's.
                self._store.add_gateway_scrape(target.name, result)
            else:
                self._store.add_engine_scrape(target.name, result)
                self._metrics.engine_scraped(target.name, result)

        return run

    def _scheduled_job(self, name: str) -> JobFunction:
        async def run() -> None:
            schedule = next((s for s in self._config().jobs.schedules if s.name == name), None)
            if schedule is None:
                return
            try:
                record = self._job_manager.submit(
                    schedule.kind, schedule.params, schedule.params_dict, "schedule"
                )
            except JobConflictError as exc:
                LOG.warning("scheduled job %s skipped: %s", name, exc)
                self._metrics.job_was_skipped(f"job:{name}")
                return
            await self._job_manager.wait(record.id)

        return run

    # -- shutdown -----------------------------------------------------------------------------------

    def stop_scheduling(self) -> None:
        """Start no job from now on; the ones the shutdown cancels later end quietly."""
        self._stopping = True
        self._scheduler.shutdown()

    async def finish_running(self, grace_s: float) -> None:
        """Give in-flight jobs ``grace_s`` to finish, then cancel the rest and wait for them."""
        running = list(self._running)
        if not running:
            return
        _, pending = await asyncio.wait(running, timeout=grace_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    def _tracked(self, job: JobFunction) -> JobFunction:
        """Keep the job's task while it runs, so a shutdown can let it finish (or cancel it)."""

        async def run() -> None:
            task = asyncio.current_task()
            if task is not None:
                self._running.add(task)
            try:
                await job()
            except asyncio.CancelledError:
                if not self._stopping:
                    raise
                # Our own shutdown ended it after the grace period: a normal end, not a job error for
                # the scheduler to log as a bug with a traceback.
                LOG.debug("job cancelled by the shutdown")
            finally:
                if task is not None:
                    self._running.discard(task)

        return run
