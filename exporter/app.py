"""The composition root of the daemon: the only module that wires every layer together.

``Daemon`` owns the current ``Config``, the wall clock (injected) and the scrape session, and builds
the parts that do the work, each handed what it needs: the targets' clients, budgets and health
(``daemon.target_pool.TargetPool``); what the jobs and the jobs API ask for, with the job manager and the
stored prefill profiles (``daemon.job_host.DaemonJobEnvironment``); what goes on the scheduler,
one probe job per (target, module), one scrape job per engine or gateway, one per scheduled job, and
probes on demand (``daemon.probe_jobs.ProbeJobs`` on ``daemon.scheduler.JobScheduler``; a shutdown
cuts on-demand probes short, ``daemon.on_demand``); the ``ResultStore`` and its collector; the
exporter's self-metrics and loop-lag watcher (``daemon.loop_lag``). ``web_app`` serves it: the daemon starts and stops with its web app
(aiohttp's ``cleanup_ctx``). It also does reloads: a new config replaces the old one only after a full
successful parse; jobs are added, replaced or removed by id; probes in flight finish on the old settings.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping

import aiohttp
import numpy as np
from aiohttp import web
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector

from exporter.daemon.config_facts import (
    histogram_buckets,
    jobs_folder,
    profiles_folder,
    store_limits,
    unapplied_changes,
    window_label,
)
from exporter.daemon.job_host import DaemonJobEnvironment
from exporter.daemon.loop_lag import LoopLagWatcher
from exporter.daemon.on_demand import OnDemandDeadlines
from exporter.daemon.probe_jobs import ProbeJobs, outcome_recorder
from exporter.daemon.scheduler import JobScheduler
from exporter.daemon.target_pool import TargetPool, TargetState
from exporter.daemon.traffic_service import TrafficService
from exporter.evaluation import DeadlinePolicy
from exporter.exposition import render
from exporter.exposition.collector import FluidityCollector
from exporter.exposition.job_gauges import JobsCollector
from exporter.exposition.result_store import ResultStore
from exporter.exposition.self_metrics import SelfMetrics
from exporter.jobs.job_records import JobStore
from exporter.jobs.profiles import ProfileStore
from exporter.load.config_workloads import CONFIG_CHECKS
from exporter.settings import Config, SettingsError, load_config_file
from exporter.settings.cpus import available_cpus
from exporter.streams.result import ProbeRun
from exporter.web.metrics_cache import MAX_AGE_S
from exporter.web.routes import build_app

LOG = logging.getLogger(__name__)
SHUTDOWN_GRACE_S = 5.0  # in-flight probes may finish within this, then they are cancelled
# An on-demand /probe in flight at shutdown may run this long, and then answers as failed (``shutdown``):
# within the web server's own grace (SHUTDOWN_GRACE_S), which ends it with no answer (daemon.on_demand).
ON_DEMAND_GRACE_S = SHUTDOWN_GRACE_S - 0.5


class Daemon:
    """The running exporter. ``start``/``stop`` pair up; ``reload`` and ``probe_now`` serve the web layer."""

    def __init__(
        self,
        config: Config,
        *,
        config_path: str | None = None,
        seed: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self._clock = clock  # the wall clock: reload stamps, profile dates, health times, the collector's now
        self.config_path = config_path
        self.registry = own_registry()  # the exporter's own health
        self.metrics = SelfMetrics(self.registry)
        self.store = ResultStore(store_limits(config), histogram_buckets(config))
        windows = {window_label(s): s for s in config.global_.windows_s}
        self.collector = FluidityCollector(self.store, windows, clock=clock)
        self.pool = TargetPool(
            wall_clock=clock, on_calibrated=lambda t, c: self.metrics.calibrated(t, c.requests, c.seconds)
        )
        # The observer, when configured; its windows are the probes'.
        self.traffic = TrafficService.of(config, histogram_buckets(config), windows)
        self.scrape_session: aiohttp.ClientSession | None = None
        self.job_env = DaemonJobEnvironment(
            lambda: self.config,
            self.pool,
            ProfileStore(profiles_folder(config)),
            JobStore(jobs_folder(config), keep=config.jobs.history),
            scrape_session=lambda: self.scrape_session,
            cpus=available_cpus(),
            clock=clock,
        )
        self.registry.register(JobsCollector(self.job_env.job_snapshot))
        self.jobs = JobScheduler(on_outcome=outcome_recorder(self.metrics))
        self.probes = ProbeJobs(
            self.jobs,
            self.pool,
            self.job_env,
            self.store,
            self.metrics,
            rng=np.random.default_rng(seed),
            on_results=self.traffic.probe_results if self.traffic is not None else None,
        )
        self.listen_address: str | None = None  # where the web app listens (set by whoever serves it)
        self.listen_flag = False  # whether --web.listen-address chose it, over global.listen_address
        self.lag = LoopLagWatcher(self.metrics.observe_loop_lag)
        self.ready = False
        self.on_demand = OnDemandDeadlines(ON_DEMAND_GRACE_S)

    # -- lifecycle ----------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the clients, schedule every job and start the scheduler on the running loop."""
        if self.traffic is not None:
            await self.traffic.start()  # first: a missing extra or a port in use stops the start
        self.scrape_session = aiohttp.ClientSession()
        await self._apply(self.config)
        self.jobs.start()
        self.lag.start()
        self.metrics.config_loaded(True, self._clock())
        self.ready = True

    async def stop(self) -> None:
        """Stop scheduling, let nothing new start, close every connection."""
        self.ready = False
        self.pool.closing = True
        self.probes.stop_scheduling()
        await self.job_env.job_manager.shutdown()  # running jobs end "interrupted", as after a restart
        await self.probes.finish_running(SHUTDOWN_GRACE_S)
        await self.lag.stop()
        await self.pool.close()
        if self.traffic is not None:
            await self.traffic.stop()
        if self.scrape_session is not None:
            await self.scrape_session.close()

    @property
    def targets(self) -> Mapping[str, TargetState]:
        """Each configured target's client, budget, health and probes in flight."""
        return self.pool.states

    def metrics_text(self) -> bytes:
        """The /metrics body: the probe and engine families (cached per series) and the exporter's
        self-metrics, both through the plain formatter (``exporter.exposition.render``)."""
        traffic = self.traffic.render_text() if self.traffic is not None else ""
        return (self.collector.render_text() + traffic + render.render(self.registry.collect())).encode()

    # -- configuration ------------------------------------------------------------------------------

    async def reload(self) -> tuple[bool, str]:
        """Re-read the config file; the old config stays in force unless the new one parses completely."""
        if self.config_path is None:
            message = "no --config.file to reload (running on the embedded default)"
            LOG.warning("reload asked for: %s", message)  # a SIGHUP has no other answer
            return False, message
        try:
            config = load_config_file(self.config_path, checks=CONFIG_CHECKS)
        except SettingsError as exc:
            return self._reload_failed(problems_message(self.config_path, exc))
        old = self.config
        try:
            await self._apply(config)
        except Exception:  # a bug of ours (check-config accepted the file): keep the old config running
            LOG.exception("config reload failed while applying it: a bug, not a config problem")
            await self._apply(old)
            return self._reload_failed(f"{self.config_path}: applying it failed (a bug; see the log)")
        self.metrics.config_loaded(True, self._clock())
        notes = unapplied_changes(old, config, self.listen_address, self.listen_flag)
        for note in notes:
            LOG.warning("config reloaded, but %s", note)
        LOG.info("config reloaded from %s", self.config_path)
        return True, "\n".join([f"reloaded {self.config_path}", *notes])

    def _reload_failed(self, message: str) -> tuple[bool, str]:
        self.metrics.config_loaded(False, self._clock())
        LOG.error("config reload failed, keeping the previous config:\n%s", message)
        return False, message

    async def _apply(self, config: Config) -> None:
        old = self.config
        self.config = config
        self.job_env.warn_about_workers()
        for name in await self.pool.sync(config):
            self.metrics.forget_target(name)  # a removed target's engine-scrape counters go with it
        self.probes.apply(old, config)

    # -- what the routes ask for --------------------------------------------------------------------

    async def probe_now(self, target_name: str, module_name: str, timeout_s: float) -> ProbeRun:
        """One on-demand probe (``ProbeJobs.probe_now``), as ``/probe`` asks for it, within ``timeout_s``
        or, once a shutdown began, ``ON_DEMAND_GRACE_S`` (``OnDemandDeadlines.run``)."""
        return await self.on_demand.run(lambda: self.probes.probe_now(target_name, module_name), timeout_s)

    @property
    def shutting_down(self) -> bool:
        """Whether a shutdown began (``cut_on_demand``)."""
        return self.on_demand.shutting_down

    def cut_on_demand(self) -> None:
        """A shutdown began: every on-demand probe in flight has ``ON_DEMAND_GRACE_S`` left at most, so
        that it answers its scraper before the web server stops waiting for it."""
        self.pool.closing = True
        self.on_demand.cut()

    def deadline_policy(self, target: str) -> DeadlinePolicy:
        """The target's SLO deadlines (``DaemonJobEnvironment.deadline_policy``), as the routes ask."""
        return self.job_env.deadline_policy(target)


def own_registry() -> CollectorRegistry:
    """A registry for the exporter's own health, with the standard process_* and python_* families every
    Prometheus client exports."""
    registry = CollectorRegistry(auto_describe=True)
    for collector in (ProcessCollector, PlatformCollector, GCCollector):
        collector(registry=registry)
    return registry


def problems_message(path: str, error: SettingsError) -> str:
    """What a reload answers for a config file that does not parse: every problem, one a line."""
    count = len(error.problems)
    lines = "\n".join(f"  {problem}" for problem in error.problems)
    return f"{path}: {count} problem{'s' * (count != 1)}\n{lines}"


def web_app(
    daemon: Daemon,
    *,
    enable_lifecycle: bool = False,
    metrics_max_age_s: float = MAX_AGE_S,
    jobs: bool = True,
) -> web.Application:
    """``daemon``'s web app (``enable_lifecycle`` allows ``POST /-/reload``; ``/metrics`` rendered at
    most once per ``metrics_max_age_s``; ``jobs`` False leaves ``/-/reload`` and the jobs API to
    ``build_jobs_app``); the daemon starts when the app's runner is set up and stops when it is
    cleaned up, after the last request."""

    async def running(_app: web.Application) -> AsyncIterator[None]:
        await daemon.start()
        try:
            yield
        finally:
            await daemon.stop()

    async def shutting_down(_app: web.Application) -> None:  # before the server waits for handlers
        daemon.cut_on_demand()

    app = build_app(daemon, enable_lifecycle=enable_lifecycle, metrics_max_age_s=metrics_max_age_s, jobs=jobs)
    app.cleanup_ctx.append(running)
    app.on_shutdown.append(shutting_down)
    return app
