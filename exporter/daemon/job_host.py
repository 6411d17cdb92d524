"""The daemon as its jobs see it: what the capacity and profile runners ask for
(``jobs.job_environment.JobEnvironment``) and what the jobs API asks for (``web.jobs_api.JobService``).

It owns the job manager and the targets' stored prefill profiles (their ``Dp`` models), pauses a
target's scheduled probes while a job runs on it, and counts the jobs that ended. The config is read
through a callable at every call, because a reload replaces it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable

import aiohttp

from exporter.daemon.job_snapshots import jobs_snapshot
from exporter.daemon.target_pool import TargetPool
from exporter.engine.scrape import Page, scrape
from exporter.evaluation import DeadlinePolicy
from exporter.exposition.job_gauges import JobsSnapshot
from exporter.jobs.capacity_runner import capacity_runner
from exporter.jobs.job_records import JobRecord, JobStore
from exporter.jobs.manager import JobManager
from exporter.jobs.prefill_profile import PrefillProfile
from exporter.jobs.profile_runner import profile_runner
from exporter.jobs.profiles import ProfileStore, StoredProfile, deadline_policy_with_profile
from exporter.probe.client import ProbeClient
from exporter.settings import Config
from exporter.settings.job_params import JobLimits
from exporter.streams.request import Secret

LOG = logging.getLogger(__name__)
ENGINE_SCRAPE_TIMEOUT_S = 10.0  # an engine /metrics scrape, for a job or on the engine's schedule

SessionSource = Callable[[], aiohttp.ClientSession | None]


class DaemonJobEnvironment:
    """The job manager with its runners, the stored profiles, and the targets paused for a job."""

    def __init__(
        self,
        config: Callable[[], Config],
        pool: TargetPool,
        profiles: ProfileStore,
        job_store: JobStore,
        *,
        scrape_session: SessionSource,
        cpus: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._config = config
        self._pool = pool
        self._profiles = profiles
        self.scrape_session = scrape_session  # the daemon's scrape session (None: not open, or closed)
        self._clock = clock  # the wall clock a stored profile is dated by
        self.cpus = cpus  # the container's CPU quota bounds jobs.workers
        self.prefill_profiles: dict[str, StoredProfile] = profiles.load_all()
        job_store.load()
        self.job_store = job_store
        self.job_manager = JobManager(
            job_store,
            {"capacity": capacity_runner(self), "prefill-profile": profile_runner(self)},
            on_start=self._job_started,
            on_finish=self._job_finished,
            max_duration_s=lambda: self.config.jobs.limits.max_duration_s,
        )
        self.paused: set[str] = set()  # targets whose scheduled probes wait for a job to end
        # Jobs ended since start by (target, kind, state); jobs_snapshot lists the zeros.
        self.jobs_finished: Counter[tuple[str, str, str]] = Counter()

    @property
    def config(self) -> Config:
        """The config in force now."""
        return self._config()

    def warn_about_workers(self) -> None:
        """Say so when ``jobs.workers`` asks for more CPUs than the container may use."""
        wanted = self.config.jobs.limits.max_workers
        if wanted > self.cpus:
            LOG.warning(
                "jobs.workers is %d but this container may use %d CPUs (cgroup quota): jobs use at most %d",
                wanted, self.cpus, self.cpus,
            )  # fmt: skip

    # -- what the jobs API asks for -----------------------------------------------------------------

    def jobs_token(self) -> Secret | None:
        return self.config.jobs.api_token

    def job_limits(self) -> JobLimits:
        """The configured ceilings, ``jobs.workers`` bounded by the CPUs this container may use."""
        limits = self.config.jobs.limits
        return dataclasses.replace(limits, max_workers=min(limits.max_workers, self.cpus))

    def job_targets(self) -> dict[str, tuple[str, ...]]:
        return {target.name: target.modules for target in self.config.targets}

    # -- what the runners ask for -------------------------------------------------------------------

    def lease(self, target: str) -> contextlib.AbstractAsyncContextManager[ProbeClient]:
        """The target's client for a job's life (``TargetPool.lease``)."""
        return self._pool.lease(target)

    def deadline_policy(self, target: str) -> DeadlinePolicy:
        """The target's SLO deadlines, ``Dp`` from its stored prefill profile unless the SLO has a model
        or a deadline of its own."""
        slo = self.config.slo_for(target)
        profile = self.prefill_profiles.get(target)
        return deadline_policy_with_profile(
            DeadlinePolicy.of(slo), profile, deadline_given=slo.prefill_deadline_given
        )

    def set_profile(self, target: str, profile: StoredProfile) -> None:
        """Use ``profile`` for ``target``'s deadlines from now on (the job runner has saved it already)."""
        self.prefill_profiles[target] = profile

    def store_profile(self, target: str, profile: PrefillProfile) -> None:
        """Save a fitted profile under ``state_dir`` and use it for the target's deadlines."""
        assert profile.model is not None
        samples = profile.to_dict()["samples"]
        self.set_profile(target, self._profiles.save(target, profile.model, self._clock(), samples))

    async def engine_busy(self, target: str) -> float | None:
        """Running + waiting requests in the target's engine, from a scrape now (None without engine
        metrics, when the scrape fails or the engine names neither)."""
        configured = next((t for t in self.config.targets if t.name == target), None)
        engine = configured.engine_metrics if configured is not None else None  # None: a reload removed it
        session = self.scrape_session()
        if engine is None or session is None:
            return None
        page = Page(engine.url, engine.kind, engine.model, headers=engine.headers())
        result = await scrape(session, page, ENGINE_SCRAPE_TIMEOUT_S)
        return result.snapshot.in_engine() if result.snapshot is not None else None

    async def wait_idle(self, target: str) -> None:
        """Until the target's probes in flight have ended (their own timeouts bound the wait)."""
        await self._pool.wait_idle(target)

    # -- jobs starting and ending -------------------------------------------------------------------

    def _job_started(self, record: JobRecord) -> None:
        # Our own probes would disturb the job (and a prefill profile must run in isolation).
        self.paused.add(record.target)

    def _job_finished(self, record: JobRecord) -> None:
        self.paused.discard(record.target)
        self.jobs_finished[(record.target, record.kind, record.state)] += 1

    def job_snapshot(self) -> JobsSnapshot:
        """The latest capacity search per (target, module), the stored profiles, the job counts, the
        context each target serves and the modules that cannot fit it."""
        states = self._pool.states
        contexts = {name: state.context.tokens for name, state in states.items()}
        unfit = {(name, module) for name, state in states.items() for module in state.context.unfit}
        configured = {(target.name, module.name) for target, module in self.config.probes()}
        snapshot = jobs_snapshot(
            self.job_store.records(),
            self.prefill_profiles,
            self.config.targets,
            self.jobs_finished,
            contexts,
            over_context=tuple(sorted(unfit & configured)),  # a module a reload removed is gone
        )
        return dataclasses.replace(snapshot, unwritten=self._unwritten())

    def _unwritten(self) -> dict[str, bool]:
        """Whether the latest write of each state_dir folder failed (none without a state_dir)."""
        stores = {"jobs": (self.job_store.folder, self.job_store.write_health)}
        stores["profiles"] = (self._profiles.folder, self._profiles.write_health)
        return {name: health.failing for name, (folder, health) in stores.items() if folder is not None}
