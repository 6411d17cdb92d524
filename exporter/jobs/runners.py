"""The two jobs as the daemon runs them: a capacity search and a prefill profile of one target.

Each runner takes the parsed parameters and a ``JobContext`` (progress and steps, persisted by the job
store) and returns the JSON-ready result. What it needs from the daemon (the current config, the
target's probe client, its deadlines, where profiles go) comes through ``JobEnvironment``, so the
runners can be driven by the daemon or by a test with a simulator on loopback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from exporter.config.job_params import CapacityParams, JobLimits, JobParams, ProfileParams, SloSpec
from exporter.config.model import Config, ShardsConfig, SloConfig, Target
from exporter.evaluation import DeadlinePolicy
from exporter.jobs.capacity import CapacityResult, search_capacity
from exporter.jobs.capacity_search import SearchSettings
from exporter.jobs.drain import Busy, Drained, wait_drained
from exporter.jobs.manager import JobContext, JobFailedError, Runner
from exporter.jobs.prefill_profile import LengthSample, PrefillProfile, profile_prefill
from exporter.jobs.search_progress import SearchProgress
from exporter.jobs.trial import TrialPlan, TrialReport, plan_trial, run_trial
from exporter.jobs.trial_shards import run_sharded_trial
from exporter.jobs.trial_verdict import TrialSlo
from exporter.load.prompts import ApproxPromptBuilder, PromptBuilder, SimPromptBuilder
from exporter.load.shard_local import local_shards
from exporter.load.shard_pool import ShardPool, remote_shards
from exporter.load.shard_protocol import PoolSettings
from exporter.load.workloads import Workload
from exporter.probe.client import ProbeClient, TargetError
from exporter.probe.result import ProbeResult
from exporter.probe.target import RequestSpec, Secret, TargetSettings
from exporter.stats.slo import DECODE_TIERS

DEFAULT_START = {"rate": 1.0, "concurrency": 1.0}
# The default floor of a rate search: the rate at which one trial's requests take this long to send. A
# search descending below it would plan trials of tens of minutes (seen in CI: 35 minutes at 0.0625
# req/s), and an operator would rather read "not met at any load we can offer".
FLOOR_TRIAL_S = 900.0
# A trial's default time limit: its planned send span times this, plus a tail for the last requests.
TRIAL_SPAN_FACTOR, TRIAL_TAIL_S = 1.5, 60.0
BUDGET_SHARE = 0.9  # the default search budget: this share of jobs.limits.max_duration_s
REPEAT_SEED_STEP = 7919  # seed offset of each repeat at one load (a prime: no overlap with seed + 1)
PROFILE_START_DELAY_S = 0.05  # a profile's request waits this long for its shard to start it
# A profile keeps the minimum TTFT of its repeats, which a late stamp cannot lower, and its in-process
# form does not judge saturation either: a shard's flagged result is kept (the flag stays on it).
PROFILE_POOL = PoolSettings(max_unreliable_share=1.0)


class JobEnvironment(Protocol):
    """What the runners need from the daemon."""

    @property
    def config(self) -> Config: ...

    def job_limits(self) -> JobLimits: ...

    def client_for(self, target: str) -> ProbeClient: ...

    def deadline_policy(self, target: str) -> DeadlinePolicy: ...

    def store_profile(self, target: str, profile: PrefillProfile) -> None: ...

    async def engine_busy(self, target: str) -> float | None:
        """Requests running + waiting in the target's engine from a fresh scrape of its metrics (None
        without engine metrics or when the scrape fails)."""

    async def wait_idle(self, target: str) -> None:
        """Until no probe of ours is in flight to ``target`` (new ones are paused by then)."""


# -- capacity -----------------------------------------------------------------------------------------


def resolve_trial_slo(spec: SloSpec, configured: SloConfig, policy: DeadlinePolicy) -> TrialSlo:
    """The job's SLO: what the job says, else the target's SLO config (``policy`` carries its ``Dp``,
    from the stored prefill profile when there is one)."""
    deadlines = policy if spec.prefill_deadline_s is None else DeadlinePolicy(spec.prefill_deadline_s)
    return TrialSlo(
        deadlines=deadlines,
        decode_deadline=decode_deadline(spec, configured),
        target_fluidity=spec.target_fluidity or configured.target_fluidity,
        percentile=spec.percentile or configured.percentile,
        objectives=spec.objectives,
        goodput=spec.goodput,
        min_goodput_ratio=spec.min_goodput_ratio,
    )


def decode_deadline(spec: SloSpec, configured: SloConfig) -> float:
    """``decode_deadline_s``, or the named tier of the target's SLO (the paper's tiers by default)."""
    if spec.decode_deadline_s is not None:
        return spec.decode_deadline_s
    tiers = {**DECODE_TIERS, **dict(configured.decode_tiers)}
    if spec.decode_tier not in tiers:
        raise JobFailedError(f'unknown decode tier "{spec.decode_tier}"; valid: {", ".join(tiers)}')
    return tiers[spec.decode_tier]


def search_settings(params: CapacityParams, limits: JobLimits, slo: TrialSlo | None = None) -> SearchSettings:
    """The search's bounds: ``start`` within ``[floor, max_load]``; with ``slo``, its verdicts are
    judged by the pass fraction's interval at the SLO's percentile and the job's confidence."""
    concurrency = params.load == "concurrency"
    ceiling = float(limits.max_concurrency if concurrency else limits.max_rate)
    max_load = min(params.max_load or ceiling, ceiling)
    start = min(params.start or DEFAULT_START[params.load], max_load)
    return SearchSettings(
        start, max_load, params.tolerance, params.max_trials, integer=concurrency,
        floor=min(default_floor(params), start), required=None if slo is None else slo.required,
        confidence=params.confidence,
    )  # fmt: skip


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
        workload = config.workload(target.name, module)
        slo = resolve_trial_slo(params.slo, config.slo_for(target), env.deadline_policy(target.name))
        client = env.client_for(target.name)
        await model_of(client)
        await env.wait_idle(target.name)
        remote, limits = config.jobs.shards, env.job_limits()
        progress = SearchProgress(params, ctx.progress)
        async with job_shards(remote, config.jobs.api_token, params.workers, env, client) as pool:
            result = await run_capacity_search(
                params, search_settings(params, limits, slo), workload, slo,
                lambda: env.client_for(target.name), budget=TokenBudget(limits.max_tokens),
                on_trial=_reporter(ctx, progress), pool=pool,
                shard_url=remote.url_for(target.name) if remote is not None else None,
                time_budget_s=time_budget(params, limits), progress=progress,
                busy=lambda: env.engine_busy(target.name),
            )  # fmt: skip
        if not result.trials:
            raise JobFailedError(result.stopped_by)
        result.gpus, result.gpu_hour_price = target.gpus, target.gpu_hour_price
        progress.finished(result)
        return {"target": target.name, "module": module, **shards_used(pool), **result.to_dict()}

    return run


async def run_capacity_search(
    params: CapacityParams,
    settings: SearchSettings,
    workload: Workload,
    slo: TrialSlo,
    client: Callable[[], ProbeClient],
    *,
    budget: TokenBudget | None = None,
    on_trial: Callable[[TrialReport], None] | None = None,
    pool: ShardPool | None = None,
    shard_url: str | None = None,
    time_budget_s: float | None = None,
    progress: SearchProgress | None = None,
    busy: Busy | None = None,
) -> CapacityResult:
    """A whole search (the daemon's job and the CLI share it). ``client()`` is asked for the target's
    client at every send: a reload that changes the target's settings swaps it mid-search. With a
    ``pool`` every trial is sharded over its shards (worker processes or pods), which reach the target
    at ``shard_url`` when given (pods of their own cannot use a sidecar's loopback). Every trial after
    the first waits for a drained engine (``busy``: its running + waiting requests) and ends at its time
    limit; the search ends at ``time_budget_s``."""
    if pool is not None and workload.sessions:
        # A shard sends single requests: a session's later turns need its earlier answers in one place.
        raise JobFailedError(
            "multi-turn sessions run in one process: drop workers (or jobs.shards) for this workload"
        )
    trials = _SearchTrials(params, workload, slo, client, budget, pool, shard_url, progress)
    # Every trial sends the same lengths (common random numbers) whatever its load, so one plan gives
    # the worst case of them all.
    worst_case = trials.plan(0, settings.start, False).planned_tokens if budget is not None else 0

    def afford(load: float) -> str | None:
        return budget.refusal(worst_case) if budget is not None else None

    async def drain() -> Drained:
        return await wait_drained(busy)

    await client().resolve_model()
    return await search_capacity(
        settings, trials.run, load_kind=params.load, slo=slo.describe(), on_trial=on_trial, afford=afford,
        early_stop=params.early_stop, time_budget_s=time_budget_s, drain=drain,
    )  # fmt: skip


@dataclass
class _SearchTrials:
    """The trials of one search: planned (fresh prompt texts per search, new samples at a repeated
    load), run in process or over the shards, and counted against the token budget."""

    params: CapacityParams
    workload: Workload
    slo: TrialSlo
    client: Callable[[], ProbeClient]
    budget: TokenBudget | None
    pool: ShardPool | None
    shard_url: str | None
    progress: SearchProgress | None
    salt: int = field(default_factory=lambda: secrets.randbits(40))  # no prefix cache from another search
    repeats: Counter[float] = field(default_factory=Counter)  # trials so far at each load

    def plan(
        self,
        index: int,
        load: float,
        may_stop: bool,
        time_left: float | None = None,
        settle: tuple[int, int] | None = None,
    ) -> TrialPlan:
        # A repeat at a load draws new lengths and gaps: the same ones would only replay the same sample.
        params = self.params
        seed = params.seed + REPEAT_SEED_STEP * self.repeats[load]
        planned = plan_trial(
            self.workload, load, concurrency=params.load == "concurrency", arrival=params.arrival,
            warmup=params.warmup_requests, requests=params.requests_per_trial, seed=seed,
            salt=self.salt + index * 1_000_000, duration_s=params.trial_duration_s, early_stop=may_stop,
        )  # fmt: skip
        limit = trial_time_limit(planned, params, time_left)
        return dataclasses.replace(planned, time_limit_s=limit, settle=settle)

    async def send(
        self, spec: RequestSpec, at: float | None, started: Callable[[ProbeResult], None]
    ) -> ProbeResult:
        return await self.client().send(spec, at, on_start=started)

    async def run(
        self, index: int, load: float, may_stop: bool, time_left: float | None, settle: tuple[int, int] | None
    ) -> TrialReport:
        planned = self.plan(index, load, may_stop, time_left, settle)
        self.repeats[load] += 1
        progress = self.progress
        if progress is not None:
            progress.started(index, load, planned)
        if self.pool is not None:
            settings = self.client().settings
            if self.shard_url is not None:
                settings = dataclasses.replace(settings, base_url=self.shard_url)
            report = await run_sharded_trial(index, planned, self.slo, self.pool, settings)
        else:
            done = progress.request_done if progress is not None else None
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


async def model_of(client: ProbeClient) -> str:
    """The target's model; a target that cannot name it fails the job with its answer (not a bug)."""
    try:
        return await client.resolve_model()
    except TargetError as exc:
        raise JobFailedError(f"the target did not answer: {exc}") from None


def _reporter(ctx: JobContext, progress: SearchProgress) -> Callable[[TrialReport], None]:
    def report(trial: TrialReport) -> None:
        ctx.add_step(trial.to_dict())
        progress.trial_done(trial)

    return report


@contextlib.asynccontextmanager
async def job_shards(
    remote: ShardsConfig | None,
    token: Secret | None,
    asked: int | None,
    env: JobEnvironment,
    client: ProbeClient,
    local: PoolSettings | None = None,
) -> AsyncIterator[ShardPool | None]:
    """The shards a job sends through: the Indexed Job's pods when ``jobs.shards`` is configured (they
    present the jobs token), else ``asked`` (or ``jobs.workers``) local worker processes, else none
    (this process sends)."""
    workers = asked or env.job_limits().max_workers
    if remote is not None and token is not None:
        pools = remote_shards(remote.count, token.reveal(), remote.listen, remote.pool)
    elif workers > 1:
        pools = local_shards(workers, client.settings.api_key, local)
    else:
        yield None
        return
    async with contextlib.AsyncExitStack() as stack:
        try:
            pool = await stack.enter_async_context(pools)
        except TimeoutError as exc:  # shards that never came: the job fails with who and why
            raise JobFailedError(str(exc)) from None
        except OSError as exc:  # the port is taken, e.g. by another target's sharded search
            listen = remote.listen if remote is not None else "127.0.0.1"
            raise JobFailedError(f"cannot listen for shards on {listen}: {exc.strerror or exc}") from None
        yield pool


def shards_used(pool: ShardPool | None) -> dict[str, int]:
    """How many client processes sent the job's requests (for its result)."""
    return {"workers": pool.shards if pool is not None else 1}


def one_at_a_time(
    pool: ShardPool, settings: TargetSettings
) -> Callable[[RequestSpec], Awaitable[ProbeResult]]:
    """A ``send`` for the prefill profile: each request alone, the shards taking turns."""
    turn = itertools.count()

    async def send(spec: RequestSpec) -> ProbeResult:
        report = await pool.run_one(settings, spec, next(turn) % pool.shards, PROFILE_START_DELAY_S)
        if report.problems or not report.in_order():
            raise JobFailedError("; ".join(report.problems) or "a shard returned no result")
        return report.in_order()[0]

    return send


# -- prefill profile ---------------------------------------------------------------------------------


def prompt_builder(target: Target) -> PromptBuilder:
    """Exact prompts for our simulator, approximate (about 4 characters a token) for real servers."""
    return SimPromptBuilder() if target.simulated else ApproxPromptBuilder()


def profile_runner(env: JobEnvironment) -> Runner:
    """The runner of ``POST /api/v1/jobs/prefill-profile`` and scheduled profiles."""

    async def run(params: JobParams, ctx: JobContext) -> dict[str, Any]:
        assert isinstance(params, ProfileParams)
        target = env.config.target(params.target)
        planned = sum(params.lengths) * params.repeats
        limit = env.job_limits().max_tokens
        if planned > limit:
            raise JobFailedError(
                f"the profile would send {planned} prompt tokens; jobs.limits.max_tokens is {limit}"
            )
        client = env.client_for(target.name)
        await model_of(client)
        await env.wait_idle(target.name)  # in isolation: nothing else of ours in flight
        async with job_shards(None, None, params.workers, env, client, PROFILE_POOL) as pool:
            profile = await profile_prefill(
                client.send if pool is None else one_at_a_time(pool, client.settings), prompt_builder(target),
                target.api, params.lengths, params.repeats, _sample_reporter(ctx, len(params.lengths)),
            )  # fmt: skip
        if profile.model is None:
            raise JobFailedError("no prompt length got an answer; see the steps for each length's outcomes")
        if params.apply:
            env.store_profile(target.name, profile)
        return {"target": target.name, "applied": params.apply, **shards_used(pool), **profile.to_dict()}

    return run


def _sample_reporter(ctx: JobContext, lengths: int) -> Callable[[LengthSample], None]:
    done = 0

    def report(sample: LengthSample) -> None:
        nonlocal done
        done += 1
        ctx.add_step(
            {
                "prompt_tokens": sample.prompt_tokens,
                "min_ttft_s": sample.best,
                "outcomes": dict(sample.outcomes),
                "errors": sample.errors[:3],
            }
        )
        best = f"{sample.best:.4f} s" if sample.best is not None else "no answer"
        ctx.progress(done / lengths, f"{sample.prompt_tokens} tokens: min TTFT {best}")

    return report
