"""A capacity search run from this process (the ``capacity`` command), without the daemon.

The flags are the jobs API's parameters, read by its own parser without the daemon's ceilings
(``exporter.settings.capacity_options``); the SLO is resolved as the daemon resolves a job's, with the
default SLO config in place of a target's and ``Dp`` from the prefill flags. The search sends from this
process's client, or over local worker processes.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import aiohttp
from yarl import URL

from exporter.engine.scrape import Page, scrape
from exporter.evaluation import DeadlinePolicy
from exporter.jobs.capacity_loop import Busy, OnInterrupt
from exporter.jobs.capacity_report import SearchProgress
from exporter.jobs.capacity_result import CapacityResult
from exporter.jobs.capacity_runner import (
    BUDGET_SHARE,
    CapacitySearch,
    SearchTarget,
    SearchWatch,
    resolve_trial_slo,
    run_capacity_search,
    search_settings,
    time_budget,
)
from exporter.jobs.manager import JobFailedError
from exporter.jobs.trial_verdict import TrialSlo
from exporter.load.plan_runner import worker_pool
from exporter.load.workloads import Workload
from exporter.probe.client import ProbeClient
from exporter.settings.capacity_options import CLI_LIMITS
from exporter.settings.cost import Cost
from exporter.settings.job_params import CapacityParams, JobLimits
from exporter.settings.problems import SettingsError
from exporter.settings.slo import Slo
from exporter.settings.target import TargetSettings

NO_COST = Cost()  # no --gpus: a result without cost figures
# As the daemon's default: a share of the default jobs.limits.max_duration_s (90% of 1 hour, 3240 s).
DEFAULT_BUDGET_S = BUDGET_SHARE * JobLimits().max_duration_s
# A scrape of the target's /metrics before a trial (its engine drained?): a quick answer or none.
DRAIN_SCRAPE_TIMEOUT_S = 5.0


def trial_slo(params: CapacityParams, deadlines: Slo) -> TrialSlo:
    """The job's SLO resolved as the daemon resolves it, with the default SLO config in place of a
    target's and ``Dp`` from ``deadlines`` (an SLO of the prefill flags' deadline or model)."""
    try:
        return resolve_trial_slo(params.slo, Slo(), DeadlinePolicy.of(deadlines))
    except JobFailedError as exc:
        raise SettingsError(f"--decode-tier: {exc}") from exc


@dataclass(frozen=True)
class LocalSearch:
    """What the command searches: the job's parameters and SLO, the target, the workload fitted to
    ``context`` (the tokens the target serves; None: not said), and ``cost`` (``--gpus`` and
    ``--gpu-hour-price``, for the result's cost figures)."""

    params: CapacityParams
    slo: TrialSlo
    target: TargetSettings
    workload: Workload
    context: int | None = None
    cost: Cost = NO_COST


async def search_capacity(
    search: LocalSearch,
    on_progress: Callable[[float, str], None],
    on_interrupt: OnInterrupt | None = None,
) -> CapacityResult:
    """The search, progress told to ``on_progress(fraction, message)``. Stopped by Ctrl-C or SIGTERM,
    it tells ``on_interrupt`` what it measured."""
    params, slo, settings, cost = search.params, search.slo, search.target, search.cost

    def interrupted(result: CapacityResult) -> None:
        result.gpus, result.gpu_hour_price = cost.gpus, cost.gpu_hour_price
        if on_interrupt is not None:
            on_interrupt(result)

    progress = SearchProgress(params, on_progress)
    budget = time_budget(params, CLI_LIMITS) if params.time_budget_s is not None else DEFAULT_BUDGET_S
    async with (
        ProbeClient(settings) as client,
        worker_pool(params.workers, settings) as pool,
        engine_counts(settings.base_url) as busy,
    ):
        search_with = dataclasses.replace(search_settings(params, CLI_LIMITS, slo), time_budget_s=budget)
        result = await run_capacity_search(
            CapacitySearch(params, search_with, search.workload, slo),
            SearchTarget(lambda: client, pool, busy=busy, context=search.context),
            SearchWatch(progress.trial_done, progress, interrupted),
        )
    result.gpus, result.gpu_hour_price = cost.gpus, cost.gpu_hour_price
    progress.finished(result)
    return result


@contextlib.asynccontextmanager
async def engine_counts(base_url: str) -> AsyncIterator[Busy]:
    """Requests running + waiting in the target's engine, read from ``/metrics`` at its origin (where
    vLLM, SGLang, llama.cpp with ``--metrics`` and the simulator serve them), for the drain before a
    trial; None from the first scrape that names neither on, so a target without them costs one
    request and gets the settling pause. The daemon reads the configured ``engine_metrics`` instead.
    Without it, every trial after the first waited the whole pause (2 s; 8 s of the default search)."""
    url = str(URL(base_url).origin() / "metrics")
    answers = True
    async with aiohttp.ClientSession() as session:

        async def busy() -> float | None:
            nonlocal answers
            if not answers:
                return None
            result = await scrape(session, Page(url), DRAIN_SCRAPE_TIMEOUT_S)
            count = result.snapshot.in_engine() if result.snapshot is not None else None
            answers = count is not None
            return count

        yield busy
