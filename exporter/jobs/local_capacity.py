"""A capacity search run from this process (the ``capacity`` command), without the daemon.

The options become the jobs API's parameters through its own parser (``exporter.settings.job_parse``), without
the daemon's ceilings (the person at the terminal is the authority); the SLO is resolved as the daemon
resolves a job's, with the default SLO config in place of a target's and ``Dp`` from the options. The
search sends from this process's client, or over local worker processes.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
from yarl import URL

from exporter.engine.scrape import scrape
from exporter.evaluation import DeadlinePolicy
from exporter.jobs.capacity import Busy, OnInterrupt
from exporter.jobs.capacity_report import SearchProgress
from exporter.jobs.capacity_result import CapacityResult
from exporter.jobs.capacity_runner import (
    BUDGET_SHARE,
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
from exporter.settings.bounds import MAX_JOB_REQUESTS_PER_TRIAL, MAX_JOB_TRIALS
from exporter.settings.cost import Cost
from exporter.settings.job_params import CapacityParams, JobLimits
from exporter.settings.job_parse import parse_params
from exporter.settings.oneshot import Options, flag_problem
from exporter.settings.problems import SettingsError
from exporter.settings.slo import Slo
from exporter.settings.target import TargetSettings

# The command runs on the user's own machine, against their own target: no ceilings of the daemon's,
# but the highest its config could set for the trials and their requests (a trial of 10^9 requests was
# accepted, planned in memory at ~150 MB/s, deaf to Ctrl-C while it was).
CLI_LIMITS = JobLimits(
    max_rate=1e9, max_concurrency=10**9, max_duration_s=1e12, max_tokens=10**15, max_trials=MAX_JOB_TRIALS,
    max_requests_per_trial=MAX_JOB_REQUESTS_PER_TRIAL, max_prompt_tokens=10**9, max_workers=10**6,
)  # fmt: skip
NO_COST = Cost()  # no --gpus: a result without cost figures
# As the daemon's default: a share of the default jobs.limits.max_duration_s (90% of 1 hour, 3240 s).
DEFAULT_BUDGET_S = BUDGET_SHARE * JobLimits().max_duration_s
# A scrape of the target's /metrics before a trial (its engine drained?): a quick answer or none.
DRAIN_SCRAPE_TIMEOUT_S = 5.0
# Option name -> the jobs API's parameter (top level, then under "slo").
PARAM_OPTIONS = (
    ("load", "load"), ("arrival", "arrival"), ("start", "start"), ("max_load", "max_load"),
    ("tolerance", "tolerance"), ("max_trials", "max_trials"), ("seed", "seed"),
    ("requests_per_trial", "requests_per_trial"), ("warmup_requests", "warmup_requests"),
    ("trial_duration", "trial_duration_s"), ("workers", "workers"), ("min_load", "min_load"),
    ("time_budget", "time_budget_s"), ("confidence", "confidence"),
)  # fmt: skip
SLO_OPTIONS = (
    ("decode_tier", "decode_tier"),
    ("decode_deadline", "decode_deadline_s"),
    ("target_fluidity", "target_fluidity"),
    ("percentile", "percentile"),
    ("objective", "objectives"),
)
# The flag of each parameter's path, so a problem the jobs API's parser finds names the flag.
CAPACITY_FLAGS = {key: "--" + option.replace("_", "-") for option, key in PARAM_OPTIONS} | {
    f"slo.{key}": "--" + option.replace("_", "-") for option, key in SLO_OPTIONS
}
# What the parser names by the jobs API's keys, in the command's own words: it has no config of
# ``jobs.limits`` to raise (``CLI_LIMITS`` are the most any config could set).
CLI_WORDS = {
    "requests_per_trial + warmup_requests": "--requests-per-trial + --warmup-requests",
    "jobs.limits.max_trials": "the most trials a search may run",
    "jobs.limits.max_requests_per_trial": "the most requests a trial may send",
    "jobs.limits.max_duration": "the longest a search may run",
    "jobs.limits.max_rate": "the highest rate a search may try",
    "jobs.limits.max_concurrency": "the highest concurrency a search may try",
    "jobs.limits.max_prompt_tokens": "the longest prompt a search may send",
}


def capacity_params(options: Options) -> CapacityParams:
    """The options as the API's parameters, through the API's own parser."""
    _refuse_conflicts(options)
    body: dict[str, Any] = {"target": "cli"}
    body |= {key: options[option] for option, key in PARAM_OPTIONS if options[option] is not None}
    if options["no_early_stop"]:
        body["early_stop"] = False
    slo = {key: options[option] for option, key in SLO_OPTIONS if options[option] is not None}
    if slo:
        body["slo"] = slo
    try:
        params = parse_params("capacity", body, CLI_LIMITS)
    except SettingsError as exc:
        raise SettingsError(
            "; ".join(_cli_words(flag_problem(problem, CAPACITY_FLAGS)) for problem in exc.problems)
        ) from exc
    assert isinstance(params, CapacityParams)
    return params


def _cli_words(message: str) -> str:
    """A problem with each jobs API key it names (``CLI_WORDS``) said in the command's words."""
    for key, words in CLI_WORDS.items():
        message = message.replace(key, words)
    return message


def _refuse_conflicts(options: Options) -> None:
    """Flags of which one would be ignored without a word (--decode-tier with --decode-deadline is the
    parser's own rule, the same for a jobs API body)."""
    if options["load"] == "concurrency" and options["arrival"] is not None:
        raise SettingsError(
            "--arrival: only a rate search (--load rate) has arrivals; a concurrency search keeps its "
            "requests in flight, so drop --arrival"
        )


def trial_slo(params: CapacityParams, deadlines: DeadlinePolicy) -> TrialSlo:
    """The job's SLO resolved as the daemon resolves it, with the default SLO config in place of a
    target's and ``Dp`` from ``deadlines`` (the options' prefill deadline or model)."""
    try:
        return resolve_trial_slo(params.slo, Slo(), deadlines)
    except JobFailedError as exc:
        raise SettingsError(f"--decode-tier: {exc}") from exc


async def search_capacity(
    params: CapacityParams,
    slo: TrialSlo,
    settings: TargetSettings,
    workload: Workload,
    on_progress: Callable[[float, str], None],
    cost: Cost = NO_COST,
    context: int | None = None,
    on_interrupt: OnInterrupt | None = None,
) -> CapacityResult:
    """The search against ``settings``' target, progress told to ``on_progress(fraction, message)``;
    ``cost`` is ``--gpus`` and ``--gpu-hour-price``, for the result's cost figures; ``workload`` comes
    fitted to ``context``, the tokens the target serves (None: not said). Stopped by Ctrl-C or SIGTERM,
    it tells ``on_interrupt`` what it measured."""

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
        result = await run_capacity_search(
            params, search_settings(params, CLI_LIMITS, slo), workload, slo, lambda: client,
            on_trial=progress.trial_done, pool=pool, time_budget_s=budget, progress=progress,
            busy=busy, context=context, on_interrupt=interrupted,
        )  # fmt: skip
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
            result = await scrape(session, url, DRAIN_SCRAPE_TIMEOUT_S)
            count = result.snapshot.in_engine() if result.snapshot is not None else None
            answers = count is not None
            return count

        yield busy
