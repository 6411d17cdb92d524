"""The capacity search as a job: its parameters turned into the search's bounds and SLO, its trials run.

Where a reader starts: ``run_capacity_search`` wires one search (``CapacitySearch``: what it looks
for, under which token and time budgets) to its target (``SearchTarget``) and to who hears of it
(``SearchWatch``), and runs the loop of ``capacity_loop``, with its drain; the loop's steps are
``capacity_search``'s, a trial is ``trial``'s and its verdict ``trial_verdict``'s, and what it found
is ``capacity_result``'s, said by ``capacity_report``. Nothing of those calls back up here
but through the values handed down (``capacity_loop.SearchHooks``, a trial's ``run``).

A trial is planned (fresh prompt texts per search, new samples at a repeated load), sent in process or
over the shards, and counted against the job's token budget. The daemon's runner (``capacity_runner``)
and the CLI's command (``local_capacity``) share ``run_capacity_search``. Both send a workload fitted to
the context the target serves (the runner asks it as the profile job does, the CLI as its other
commands do), so the first trial's plan, made before any trial, refuses a workload none of whose
requests fit: the job once sent them all and failed on the server's 400s, the context unnamed.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.evaluation import DeadlinePolicy
from exporter.jobs.capacity_loop import (
    FIRST_TRIAL,
    Busy,
    Drained,
    OnInterrupt,
    OnTrial,
    SearchHooks,
    TrialAsk,
    first_look,
    look_start,
    search_capacity,
    wait_drained,
)
from exporter.jobs.capacity_report import SearchProgress, result_line
from exporter.jobs.capacity_result import CapacityResult, FirstLook
from exporter.jobs.capacity_search import MAX_PARTS, SearchSettings
from exporter.jobs.job_environment import (
    JobEnvironment,
    ShardsWanted,
    job_shards,
    model_of,
    shards_used,
)
from exporter.jobs.manager import JobContext, JobFailedError, Runner
from exporter.jobs.trial import (
    StartedSend,
    TrialPlan,
    TrialShape,
    client_send,
    plan_trial,
    run_sharded_trial,
    run_trial,
)
from exporter.jobs.trial_verdict import TrialReport, TrialSlo
from exporter.load import config_workloads
from exporter.load.calibration import Calibration, calibrate_prompts
from exporter.load.shards.pool import ShardPool
from exporter.load.target_facts import ContextFit, cannot_fit, served_context
from exporter.load.workloads import Workload
from exporter.probe.client import ProbeClient
from exporter.probe.loop import off_the_loop
from exporter.settings.job_params import CapacityParams, JobLimits, JobParams, concurrency_ceiling
from exporter.settings.model import Module, Target
from exporter.settings.slo import Slo, SloSpec
from exporter.stats.binomial import fewest_to_confirm

DEFAULT_START = {"rate": 1.0, "concurrency": 1.0}
# The default floor of a rate search: the rate at which one trial's requests take this long to send. A
# search descending below it would plan trials of tens of minutes (seen in CI: 35 minutes at 0.0625
# req/s), and an operator would rather read "not met at any load we can offer".
FLOOR_TRIAL_S = 900.0
# A trial's default time limit: its planned send span times this, plus a tail for the last requests.
TRIAL_SPAN_FACTOR, TRIAL_TAIL_S = 1.5, 60.0
BUDGET_SHARE = 0.9  # the default search budget: this share of jobs.limits.max_duration_s
REPEAT_SEED_STEP = 7919  # seed offset of each repeat at one load (a prime: no overlap with seed + 1)


def resolve_trial_slo(spec: SloSpec, configured: Slo, policy: DeadlinePolicy) -> TrialSlo:
    """The job's SLO over the target's (``policy`` carries the target's ``Dp``, from the stored prefill
    profile when there is one; a job's own ``prefill_deadline_s`` replaces it)."""
    try:  # a reload may have removed the target's tier since the job was accepted
        slo = spec.applied_to(configured)
    except ValueError as exc:
        raise JobFailedError(str(exc)) from None
    deadlines = policy if spec.prefill_deadline_s is None else DeadlinePolicy.of(slo)
    ((_, decode_deadline),) = slo.decode_tiers
    return TrialSlo(deadlines, decode_deadline, slo, spec.min_goodput_ratio)


def search_settings(params: CapacityParams, limits: JobLimits, slo: TrialSlo | None = None) -> SearchSettings:
    """The search's bounds: ``start`` within ``[floor, max_load]``, the time budget (``time_budget``);
    with ``slo``, its verdicts are judged by the pass fraction's interval at the SLO's percentile and
    the job's confidence."""
    concurrency = params.load == "concurrency"
    ceiling = float(limits.max_concurrency if concurrency else limits.max_rate)
    if concurrency:
        ceiling = min(ceiling, concurrency_ceiling(params.warmup_requests, params.requests_per_trial))
    max_load = min(params.max_load or ceiling, ceiling)
    start = min(params.start or max(DEFAULT_START[params.load], params.min_load or 0.0), max_load)
    return SearchSettings(
        start, max_load, params.tolerance, params.max_trials, integer=concurrency,
        floor=min(default_floor(params), start), required=None if slo is None else slo.required,
        confidence=params.confidence, early_stop=params.early_stop, time_budget_s=time_budget(params, limits),
    )  # fmt: skip


def trial_size_warning(params: CapacityParams, slo: TrialSlo, max_parts: int = MAX_PARTS) -> str | None:
    """Why trials of ``requests_per_trial`` can never confirm the SLO's percentile, even pooled over
    the ``max_parts`` trials a load may run (None when they can). Such a search cannot end ``found``;
    worse, a small trial passes its point verdict with no miss allowed, so it climbs past the capacity
    (seen: 40 requests a trial said "at least 21.75 req/s" where a trial of 200 failed at 11.27)."""
    needed = fewest_to_confirm(slo.required, params.confidence)
    pooled = params.requests_per_trial * max_parts
    if pooled >= needed:
        return None
    return (
        f"{params.requests_per_trial} requests a trial cannot confirm p{slo.percentile:g}: that takes "
        f"{needed} requests in a row meeting it at {params.confidence:g} confidence, and a load pools at "
        f"most {max_parts} trials ({pooled} requests); its answer can be no more than a lower bound, and "
        f"one above the capacity (a small trial passes with no miss allowed): give --requests-per-trial "
        f"{math.ceil(needed / max_parts)} or more"
    )


def default_floor(params: CapacityParams) -> float:
    """``min_load``, else concurrency 1, else the rate at which a trial takes ``FLOOR_TRIAL_S`` to send."""
    if params.min_load is not None:
        return params.min_load
    if params.load == "concurrency":
        return 1.0
    return (params.warmup_requests + params.requests_per_trial) / FLOOR_TRIAL_S


def time_budget(params: CapacityParams, limits: JobLimits) -> float:
    """``time_budget_s``, else a share of the job's ``max_duration_s`` (which fails a job outright)."""
    share = limits.max_duration_s * BUDGET_SHARE
    return min(params.time_budget_s, share) if params.time_budget_s is not None else share


def module_of(params: CapacityParams, target: Target) -> str:
    if params.module is not None:
        return params.module
    if not target.modules:
        raise JobFailedError(f"target {target.name} has no module to take the workload from; name one")
    return target.modules[0]


class TokenBudget:
    """The job's ``max_tokens``: a trial starts only if its worst case still fits."""

    def __init__(self, limit: int) -> None:
        self.limit, self.spent = limit, 0

    def refusal(self, planned: int) -> str | None:
        if self.spent + planned <= self.limit:
            return None
        return (
            f"jobs.limits.max_tokens: the next trial could spend {planned} tokens and {self.spent} of "
            f"{self.limit} are spent"
        )


def capacity_runner(env: JobEnvironment) -> Runner:
    """The runner of ``POST /api/v1/jobs/capacity`` and scheduled capacity searches."""

    async def run(params: JobParams, ctx: JobContext) -> dict[str, Any]:
        assert isinstance(params, CapacityParams)
        config = env.config
        target = config.target(params.target)
        module = module_of(params, target)
        slo = resolve_trial_slo(params.slo, config.slo_for(target), env.deadline_policy(target.name))
        remote, limits = config.jobs.shards, env.job_limits()
        progress = SearchProgress(params, ctx.progress)

        def interrupted(result: CapacityResult) -> None:  # what was measured, kept as the job's result
            result.gpus, result.gpu_hour_price = target.gpus, target.gpu_hour_price
            ctx.keep_result({"target": target.name, "module": module, **result.to_dict()})

        async with env.lease(target.name) as client:
            await model_of(client)
            context = await served_context(client)
            calibration = await job_calibration(client, target, context, ctx)
            workload = fitted_workload(config.module(module), target, context, ctx, calibration)
            await env.wait_idle(target.name)
            wanted = ShardsWanted(remote, config.jobs.api_token, params.workers, in_process=workload.sessions)
            async with job_shards(wanted, env, client) as pool:
                search = CapacitySearch(
                    params,
                    search_settings(params, limits, slo),
                    workload,
                    slo,
                    TokenBudget(limits.max_tokens),
                )
                shard_url = remote.url_for(target.name) if remote is not None else None
                result = await run_capacity_search(
                    search,
                    SearchTarget(
                        lambda: client, pool, shard_url, lambda: env.engine_busy(target.name), context
                    ),
                    SearchWatch(_reporter(ctx, progress), progress, interrupted),
                )
        if result.state is None:  # no trial could be judged (or none ran): no finding to publish
            raise JobFailedError(result.stopped_by)
        if (failure := result.target_failure()) is not None:  # down or erroring: no capacity of 0
            raise JobFailedError(failure)
        if (stop := result.unmeasured_stop()) is not None:  # cut short by us: as the CLI, no answer
            raise JobFailedError(f"{stop} (what the trials before it showed: {result_line(result)})")
        result.gpus, result.gpu_hour_price = target.gpus, target.gpu_hour_price
        progress.finished(result)
        return {"target": target.name, "module": module, **shards_used(pool), **result.to_dict()}

    return run


async def job_calibration(
    client: ProbeClient, target: Target, context: int | None, ctx: JobContext
) -> Calibration | None:
    """The target's prompts fitted to its tokenizer, as a one-shot run's and its scheduled probes'
    are (None for a simulated target, whose prompts are exact, or one with ``calibrate_prompts``
    off): without it a prompt of a non-simulated simulator came out ~1.9x as long as asked, and the
    context fit's 3% margin sent a trial's longest requests into 400s. Said in the progress."""
    if not target.calibrates_prompts:
        return None
    calibration = await calibrate_prompts(client.send, target.api, context=context)
    ctx.progress(0.0, calibration.describe())
    return calibration


def fitted_workload(
    module: Module,
    target: Target,
    context: int | None,
    ctx: JobContext,
    calibration: Calibration | None = None,
) -> Workload:
    """``module``'s workload for ``target`` as its scheduled probes send it (``config_workloads``); a
    cut is said in the progress, as the profile job says the lengths it leaves out."""
    workload = config_workloads.fitted_workload(module, target, context, calibration)
    fit = ContextFit.of(workload, context)
    if fit.cut > 0:
        ctx.progress(0.0, fit.describe())
    return workload


@dataclass(frozen=True)
class SearchTarget:
    """Where a search's trials go: ``client()``, asked for the target's client at every send (a daemon's
    job leases one for its whole life: ``JobEnvironment.lease``); with a ``pool``, every trial sharded
    over its shards (worker processes or pods), which reach the target at ``shard_url`` when given
    (pods of their own cannot use a sidecar's loopback); ``busy``, the engine's running + waiting
    requests read for the drain before a trial; ``context``, the tokens the target serves (None: not
    said)."""

    client: Callable[[], ProbeClient]
    pool: ShardPool | None = None
    shard_url: str | None = None
    busy: Busy | None = None
    context: int | None = None


@dataclass(frozen=True)
class CapacitySearch:
    """What a search looks for: the job's ``params``, the search's ``settings`` (its bracket,
    tolerance and time budget), the ``workload`` its trials send (fitted to the target's context), the
    ``slo`` a trial is judged by, and the token ``budget`` trials are counted against (None: none)."""

    params: CapacityParams
    settings: SearchSettings
    workload: Workload
    slo: TrialSlo
    budget: TokenBudget | None = None


@dataclass(frozen=True)
class SearchWatch:
    """Who hears of a search as it goes: ``on_trial`` and ``progress`` after every trial, and
    ``on_interrupt``, stopped from outside, with what it measured."""

    on_trial: OnTrial | None = None
    progress: SearchProgress | None = None
    on_interrupt: OnInterrupt | None = None


async def run_capacity_search(
    search: CapacitySearch, target: SearchTarget, watch: SearchWatch = SearchWatch()
) -> CapacityResult:
    """A whole search, the one entry point the daemon's job and the ``capacity`` command share: the
    first plan, the first look when no start is given, then ``search_capacity`` over the trials sent
    to ``target``. Every trial after the first waits for a drained engine and ends at its time limit;
    the search ends at ``search.settings.time_budget_s``. The result says how the workload was fitted
    to the target's context (``CapacityResult.context``)."""
    trials = _SearchTrials(search.params, search.workload, search.slo, target, search.budget, watch.progress)
    return await _search_target(trials, search.settings, watch.on_trial, watch.on_interrupt)


async def _search_target(
    trials: _SearchTrials,
    settings: SearchSettings,
    on_trial: OnTrial | None,
    on_interrupt: OnInterrupt | None,
) -> CapacityResult:
    params, workload, target = trials.params, trials.workload, trials.target
    if target.pool is not None and workload.sessions:
        # A shard sends single requests: a session's later turns need its earlier answers in one place.
        raise JobFailedError(
            "multi-turn sessions run in one process: drop workers (or jobs.shards) for this workload"
        )
    # Every trial sends the same lengths (common random numbers) whatever its load, so one plan gives
    # the worst case of them all, and refuses a workload that cannot fit before a token is sent.
    worst_case = (await _first_plan(trials, settings.start, workload, target.context)).planned_tokens
    await target.client().resolve_model()
    look = None
    if params.start is None and params.load == "rate":  # no start given: where the target's speed says
        look = await first_look(workload, trials.slo, trials.send, seed=params.seed, salt=trials.salt)
        settings = _looked(trials, look, settings)
    if trials.progress is not None:
        # The look's slots each sent two requests: half its span is about one request's life, the
        # time a trial's last requests take after its last send.
        tail_s = look.duration_s / 2 if look is not None else 0.0
        trials.progress.begin(settings.start, settings.time_budget_s, tail_s)

    def afford(load: float) -> str | None:
        return trials.budget.refusal(worst_case) if trials.budget is not None else None

    async def drain() -> Drained:
        return await wait_drained(target.busy)

    def described(result: CapacityResult) -> CapacityResult:
        result.context, result.first_look = ContextFit.of(workload, target.context), look
        result.slo = trials.slo.describe()
        return result

    def stopped(result: CapacityResult) -> None:
        if on_interrupt is not None:
            on_interrupt(described(result))

    hooks = SearchHooks(on_trial=on_trial, afford=afford, drain=drain, on_interrupt=stopped)
    return described(await search_capacity(settings, trials.run, hooks))


def _looked(trials: _SearchTrials, look: FirstLook, settings: SearchSettings) -> SearchSettings:
    """The settings started where the first look says, with the time budget less the look's seconds
    (its tokens count against the token budget)."""
    start = look_start(look, settings)
    if trials.budget is not None:
        trials.budget.spent += look.tokens
    if trials.progress is not None:
        trials.progress.report(0.0, look.describe(start, "req/s"))
    budget = settings.time_budget_s
    left = budget - look.duration_s if budget is not None else None
    return dataclasses.replace(settings, start=start, time_budget_s=left)


async def _first_plan(
    trials: _SearchTrials, start: float, workload: Workload, context: int | None
) -> TrialPlan:
    """The first trial's plan; a ``JobFailedError`` naming the context and the workload's lengths when
    none of its requests fit the context (a ``ValueError`` of an unfitted workload is a bug of ours)."""
    try:
        return await trials.planned(TrialAsk(FIRST_TRIAL, start, False), keep=True)
    except ValueError as exc:
        if workload.max_total_tokens is None:
            raise
        raise JobFailedError(f"no trial ran: the workload {cannot_fit(workload, context, exc)}") from None


@dataclass
class _SearchTrials:
    """The trials of one search: planned (fresh prompt texts per search, new samples at a repeated
    load), run in process or over the shards, and counted against the token budget."""

    params: CapacityParams
    workload: Workload
    slo: TrialSlo
    target: SearchTarget
    budget: TokenBudget | None
    progress: SearchProgress | None
    salt: int = field(default_factory=lambda: secrets.randbits(40))  # no prefix cache from another search
    repeats: Counter[float] = field(default_factory=Counter)  # trials so far at each load
    # The first plan, made for the worst case before the search (``_first_plan``), by (index, load,
    # repeats at that load): its first trial's, taken by it.
    _first: tuple[tuple[int, float, int], TrialPlan] | None = None

    async def planned(self, ask: TrialAsk, *, keep: bool = False) -> TrialPlan:
        """The plan of trial ``index``, made off the loop: planning takes 14-20 us a request, tens of
        seconds for the ceiling of a million, which would hold the daemon's /metrics, and a Ctrl-C,
        that long; and stopped when its caller is cancelled (a cancelled job). ``keep``: kept for the
        next call for the same trial, which takes it (the first trial's, made for the worst case
        before the search: ``_first_plan``)."""
        index, load = ask.index, ask.load
        first, self._first = self._first, None  # used once: a plan of a million specs is not kept
        if first is not None and first[0] == (index, load, self.repeats[load]):
            plan = first[1]
        else:
            stop = threading.Event()
            plan = await off_the_loop(lambda: self._plan(index, load, stop), stop)
            if keep:
                self._first = ((index, load, self.repeats[load]), plan)
        limit = trial_time_limit(plan, self.params, ask.time_left_s)
        return dataclasses.replace(plan, early_stop=ask.may_stop, time_limit_s=limit, settle=ask.settle)

    def _plan(self, index: int, load: float, stop: threading.Event) -> TrialPlan:
        # A repeat at a load draws new lengths and gaps: the same ones would only replay the same sample.
        params = self.params
        shape = TrialShape(
            concurrency=params.load == "concurrency", arrival=params.arrival, warmup=params.warmup_requests,
            requests=params.requests_per_trial, seed=params.seed + REPEAT_SEED_STEP * self.repeats[load],
            salt=self.salt + index * 1_000_000, duration_s=params.trial_duration_s,
        )  # fmt: skip
        return plan_trial(self.workload, load, shape, stop)

    @property
    def send(self) -> StartedSend:
        return client_send(self.target.client)

    async def run(self, ask: TrialAsk) -> TrialReport:
        index, load = ask.index, ask.load
        planned = await self.planned(ask)
        self.repeats[load] += 1
        progress = self.progress
        if progress is not None:
            progress.started(index, load, planned)
        done = progress.request_done if progress is not None else None
        pool = self.target.pool
        if pool is not None:
            settings = self.target.client().settings
            if self.target.shard_url is not None:
                settings = dataclasses.replace(settings, base_url=self.target.shard_url)
            report = await run_sharded_trial(index, planned, self.slo, pool, settings, done)
        else:
            report = await run_trial(index, planned, self.slo, self.send, done)
        if self.budget is not None:
            self.budget.spent += report.tokens
        return report


def trial_time_limit(plan: TrialPlan, params: CapacityParams, time_left: float | None) -> float | None:
    """``trial_duration_s``, else for an open loop its planned send span x 1.5 + 60 s; never more than
    the search's time left. A concurrency trial without either has no limit of its own (the job's
    ``max_duration_s`` still ends it)."""
    limit = params.trial_duration_s
    if limit is None and plan.offsets is not None and len(plan.offsets):
        limit = float(plan.offsets[-1]) * TRIAL_SPAN_FACTOR + TRIAL_TAIL_S
    if time_left is not None:
        limit = time_left if limit is None else min(limit, time_left)
    return limit


def _reporter(ctx: JobContext, progress: SearchProgress) -> Callable[[TrialReport], None]:
    def report(trial: TrialReport) -> None:
        ctx.add_step(trial.to_dict())
        progress.trial_done(trial)

    return report
