"""The composition root of the daemon: the only module that wires every layer together.

``Daemon`` owns the current ``Config`` and wires the parts that do the work: the targets' clients,
budgets and health (``daemon.targets.TargetPool``), the scheduler with one job per (target, module) and
one scrape job per engine or gateway (``daemon.scheduler``), the ``ResultStore`` and its collector,
the exporter's self-metrics and loop-lag watcher (``daemon.loop_lag``), the job manager and the
targets' stored prefill profiles (their ``Dp`` models). It also does reloads: a new config replaces
the old one only after a full successful parse; jobs are added, replaced or removed by id; probes in
flight finish on the old settings.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping

import aiohttp
import numpy as np
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from exporter.config import Config, ConfigError, load_config_file
from exporter.daemon.config_facts import (
    histogram_buckets,
    jobs_folder,
    probe_changed,
    profiles_folder,
    unapplied_changes,
    window_label,
)
from exporter.daemon.job_environment import ENGINE_SCRAPE_TIMEOUT_S, DaemonJobEnvironment
from exporter.daemon.loop_lag import LoopLagWatcher
from exporter.daemon.scheduler import JobFunction, JobScheduler, Schedule
from exporter.daemon.targets import TargetPool, TargetState
from exporter.engine.families import ENGINE_CATALOGUE, GATEWAY_CATALOGUE
from exporter.engine.scrape import scrape
from exporter.evaluation import DeadlinePolicy
from exporter.exposition import render
from exporter.exposition.collector import FluidityCollector
from exporter.exposition.jobs import JobsCollector
from exporter.exposition.self_metrics import SelfMetrics
from exporter.exposition.store import ResultStore, StoreLimits
from exporter.jobs.manager import JobConflictError
from exporter.jobs.profiles import ProfileStore
from exporter.jobs.store import JobStore
from exporter.load.cpus import available_cpus
from exporter.probe.result import ProbeRefusedError, ProbeRun

LOG = logging.getLogger(__name__)
SHUTDOWN_GRACE_S = 5.0  # in-flight probes may finish within this, then they are cancelled


class Daemon:
    """The running exporter. ``start``/``stop`` pair up; ``reload`` and ``probe_now`` serve the web layer."""

    def __init__(self, config: Config, *, config_path: str | None = None, seed: int | None = None) -> None:
        self.config = config
        self.config_path = config_path
        self.registry = CollectorRegistry(auto_describe=True)  # the exporter's own health
        self.metrics = SelfMetrics(self.registry)
        # The standard process_* and python_* families every Prometheus client exports.
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=self.registry)
        limits = StoreLimits(
            max_age_s=max(config.global_.windows_s), max_records=config.global_.max_results_per_window
        )
        self.store = ResultStore(limits, histogram_buckets(config))
        self.collector = FluidityCollector(
            self.store, {window_label(s): s for s in config.global_.windows_s}, clock=time.time
        )
        self.jobs = JobScheduler(on_outcome=self._job_outcome)
        self.pool = TargetPool()
        self.job_env = DaemonJobEnvironment(
            lambda: self.config,
            self.pool,
            ProfileStore(profiles_folder(config)),
            JobStore(jobs_folder(config), keep=config.jobs.history),
            scrape_session=lambda: self.scrape_session,
            cpus=available_cpus(),
        )
        self.registry.register(JobsCollector(self.job_env.job_snapshot))
        self.rng = np.random.default_rng(seed)
        self.scrape_session: aiohttp.ClientSession | None = None
        self.listen_address: str | None = None  # where the web app listens (set by whoever serves it)
        self.listen_flag = False  # whether --web.listen-address chose it, over global.listen_address
        self.lag = LoopLagWatcher(self.metrics.observe_loop_lag)
        self._running: set[asyncio.Task[object]] = set()
        self.ready = False
        self.stopping = False  # set by stop(): the jobs it cancels end quietly

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the clients, schedule every job and start the scheduler on the running loop."""
        self.scrape_session = aiohttp.ClientSession()
        await self._apply(self.config)
        self.jobs.start()
        self.lag.start()
        self.metrics.config_loaded(True, time.time())
        self.ready = True

    async def stop(self) -> None:
        """Stop scheduling, let nothing new start, close every connection."""
        self.ready = False
        self.stopping = True
        self.jobs.shutdown()
        await self.job_env.job_manager.shutdown()  # running jobs end "interrupted", as after a restart
        await self._finish_running(SHUTDOWN_GRACE_S)
        await self.lag.stop()
        await self.pool.close()
        if self.scrape_session is not None:
            await self.scrape_session.close()

    async def _finish_running(self, grace_s: float) -> None:
        """Give in-flight jobs ``grace_s`` to finish, then cancel the rest and wait for them."""
        running = list(self._running)
        if not running:
            return
        _, pending = await asyncio.wait(running, timeout=grace_s)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    @property
    def targets(self) -> Mapping[str, TargetState]:
        """Each configured target's client, budget, health and probes in flight."""
        return self.pool.states

    def metrics_text(self) -> bytes:
        """The /metrics body: the probe and engine families (cached per series) and the exporter's
        self-metrics, both through the plain formatter (``exporter.exposition.render``)."""
        return (self.collector.render_text() + render.render(self.registry.collect())).encode()

    # -- configuration ------------------------------------------------------------------------------

    async def reload(self) -> tuple[bool, str]:
        """Re-read the config file; the old config stays in force unless the new one parses completely."""
        if self.config_path is None:
            return False, "no --config.file to reload (running on the embedded default)"
        try:
            config = load_config_file(self.config_path)
        except ConfigError as exc:
            count = len(exc.problems)
            lines = "\n".join(f"  {problem}" for problem in exc.problems)
            return self._reload_failed(f"{self.config_path}: {count} problem{'s' * (count != 1)}\n{lines}")
        old = self.config
        try:
            await self._apply(config)
        except Exception:  # a bug of ours (check-config accepted the file): keep the old config running
            LOG.exception("config reload failed while applying it: a bug, not a config problem")
            await self._apply(old)
            return self._reload_failed(f"{self.config_path}: applying it failed (a bug; see the log)")
        self.metrics.config_loaded(True, time.time())
        notes = unapplied_changes(old, config, self.listen_address, self.listen_flag)
        for note in notes:
            LOG.warning("config reloaded, but %s", note)
        LOG.info("config reloaded from %s", self.config_path)
        return True, "\n".join([f"reloaded {self.config_path}", *notes])

    def _reload_failed(self, message: str) -> tuple[bool, str]:
        self.metrics.config_loaded(False, time.time())
        LOG.error("config reload failed, keeping the previous config:\n%s", message)
        return False, message

    async def _apply(self, config: Config) -> None:
        old = self.config
        self.config = config
        self.job_env.warn_about_workers()
        await self._sync_targets(config)
        wanted: set[str] = set()
        for target, module in config.probes():
            job_id = f"probe:{target.name}:{module.name}"
            wanted.add(job_id)
            changed = old is config or probe_changed(old, config, target, module)
            if changed or job_id not in self.jobs.job_ids():
                schedule = Schedule(
                    module.schedule.interval_s, module.schedule.jitter_s, module.schedule.cron
                )
                self.jobs.put(job_id, self._probe_job(target.name, module.name), schedule, run_now=True)
                self.metrics.track_job(job_id)
        for target in config.targets:
            if target.engine_metrics is not None:
                job_id = f"engine:{target.name}"
                wanted.add(job_id)
                self.jobs.put(
                    job_id,
                    self._scrape_job(target.name),
                    Schedule(target.engine_metrics.interval_s),
                    run_now=True,
                )
                self.metrics.track_job(job_id)
                self.metrics.track_target(target.name)
            if target.gateway_metrics is not None:
                job_id = f"gateway:{target.name}"
                wanted.add(job_id)
                schedule = Schedule(target.gateway_metrics.interval_s)
                self.jobs.put(job_id, self._scrape_job(target.name, gateway=True), schedule, run_now=True)
                self.metrics.track_job(job_id)
        for scheduled in config.jobs.schedules:
            job_id = f"job:{scheduled.name}"
            wanted.add(job_id)
            self.jobs.put(job_id, self._scheduled_job(scheduled.name), Schedule(cron=scheduled.cron))
            self.metrics.track_job(job_id)
        for job_id in self.jobs.keep_only(wanted):
            self.metrics.forget_job(job_id)
        self.store.retain(
            [(t.name, m.name) for t, m in config.probes()],
            [t.name for t in config.targets],
            [t.name for t in config.targets if t.gateway_metrics is not None],
        )

    async def _sync_targets(self, config: Config) -> None:
        for name in await self.pool.sync(config):
            self.metrics.forget_target(name)  # its engine-scrape counters go with it

    # -- probing ------------------------------------------------------------------------------------

    def _probe_job(self, target: str, module: str) -> JobFunction:
        @self._tracked
        async def run() -> None:
            if target in self.job_env.paused:
                LOG.info("probe %s/%s skipped: a job runs on the target", target, module)
                self.metrics.job_was_skipped(f"probe:{target}:{module}")
                return
            try:
                probe = await self.probe_now(target, module, on_demand=False)
            except ProbeRefusedError as exc:
                # A back-off was logged at WARNING with its cause when it began (daemon.health); one line
                # per skipped run would bury it.
                LOG.debug("probe %s/%s skipped: %s", target, module, exc)
                self.metrics.job_was_skipped(f"probe:{target}:{module}")
                return
            slo = self.config.slo_for(target)
            self.store.add(
                target, module, probe.results, self.deadline_policy(target), slo.goodput, slos=slo.objectives
            )

        return run

    def deadline_policy(self, target: str) -> DeadlinePolicy:
        """The target's SLO deadlines (``DaemonJobEnvironment.deadline_policy``), as the routes ask."""
        return self.job_env.deadline_policy(target)

    def _scheduled_job(self, name: str) -> JobFunction:
        async def run() -> None:
            schedule = next((s for s in self.config.jobs.schedules if s.name == name), None)
            if schedule is None:
                return
            try:
                record = self.job_env.job_manager.submit(
                    schedule.kind, schedule.params, schedule.params_dict, "schedule"
                )
            except JobConflictError as exc:
                LOG.warning("scheduled job %s skipped: %s", name, exc)
                self.metrics.job_was_skipped(f"job:{name}")
                return
            await self.job_env.job_manager.wait(record.id)

        return run

    async def probe_now(self, target_name: str, module_name: str, *, on_demand: bool = True) -> ProbeRun:
        """Run one probe of ``module`` against ``target`` within the target's budget; not stored.

        On-demand probes (``/probe``) run one at a time per (target, module); scheduled ones never stack
        on themselves either (the scheduler's ``max_instances=1``), so the two kinds are tracked apart.
        """
        target, module = self.config.target(target_name), self.config.module(module_name)
        if target.name in self.job_env.paused:
            raise ProbeRefusedError(f"a job runs on {target.name}; its probes wait until it ends", "paused")
        return await self.pool.probe(target, module, self.rng, on_demand=on_demand)

    def _tracked(self, job: JobFunction) -> JobFunction:
        """Keep the job's task while it runs, so a shutdown can let it finish (or cancel it)."""

        async def run() -> None:
            task = asyncio.current_task()
            if task is not None:
                self._running.add(task)
            try:
                await job()
            except asyncio.CancelledError:
                if not self.stopping:
                    raise
                # Our own shutdown ended it after the grace period: a normal end, not a job error for
                # the scheduler to log as a bug with a traceback.
                LOG.debug("job cancelled by the shutdown")
            finally:
                if task is not None:
                    self._running.discard(task)

        return run

    # -- engine scraping and self-observation -------------------------------------------------------

    def _scrape_job(self, target_name: str, *, gateway: bool = False) -> JobFunction:
        """Scrape the target's engine (or, with ``gateway``, its gateway) ``/metrics`` into the store."""

        @self._tracked
        async def run() -> None:
            target = self.config.target(target_name)
            source = target.gateway_metrics if gateway else target.engine_metrics
            if source is None or self.scrape_session is None:
                return
            result = await scrape(
                self.scrape_session,
                source.url,
                min(source.interval_s, ENGINE_SCRAPE_TIMEOUT_S),
                kind=source.kind,
                model=source.model,
                catalogue=GATEWAY_CATALOGUE if gateway else ENGINE_CATALOGUE,
                headers=source.headers(),
            )
            if gateway:
                # Its health is fluidity_gateway_scrape_success; the engine scrape counters stay the engine's.
                self.store.add_gateway_scrape(target.name, result)
            else:
                self.store.add_engine_scrape(target.name, result)
                self.metrics.engine_scraped(target.name, result)

        return run

    def _job_outcome(self, job_id: str, outcome: str) -> None:
        record = {
            "ran": self.metrics.job_ran,
            "failed": self.metrics.job_failed,
            "misfired": self.metrics.job_misfired,
            "skipped": self.metrics.job_was_skipped,
        }[outcome]
        record(job_id)
