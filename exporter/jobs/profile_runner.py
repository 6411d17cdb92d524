"""The prefill profile as a job: prompts of each length sent one at a time, the fit stored on request.

Apart from the capacity runner because it shares only the job's environment with it: each request runs
alone (in this process, or on the shards taking turns), and its steps are the lengths' outcomes.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from exporter.jobs.job_environment import (
    JobEnvironment,
    ShardsWanted,
    job_shards,
    model_of,
    shards_used,
)
from exporter.jobs.manager import JobContext, JobFailedError, Runner
from exporter.jobs.prefill_profile import (
    LengthSample,
    ProfileRequests,
    constant_note,
    fit_ladder,
    left_out_note,
    profile_prefill,
)
from exporter.jobs.profiles import bare_prefill_warning, profile_overridden
from exporter.load.prompts import ApproxPromptBuilder, PromptBuilder, SimPromptBuilder
from exporter.load.shards.pool import ShardPool
from exporter.load.target_facts import served_context
from exporter.settings.job_params import JobParams, ProfileParams
from exporter.settings.model import Target
from exporter.settings.shards import PoolSettings
from exporter.settings.target import TargetSettings
from exporter.streams.request import RequestSpec
from exporter.streams.result import ProbeResult

PROFILE_START_DELAY_S = 0.05  # a profile's request waits this long for its shard to start it
# A profile keeps the minimum TTFT of its repeats, which a late stamp cannot lower, and its in-process
# form does not judge saturation either: a shard's flagged result is kept (the flag stays on it).
PROFILE_POOL = PoolSettings(max_unreliable_share=1.0)


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


def prompt_builder(target: Target) -> PromptBuilder:
    """Exact prompts for our simulator, approximate (about 4 characters a token) for real servers."""
    return SimPromptBuilder() if target.simulated else ApproxPromptBuilder()


def profile_runner(env: JobEnvironment) -> Runner:
    """The runner of ``POST /api/v1/jobs/prefill-profile`` and scheduled profiles."""

    async def run(params: JobParams, ctx: JobContext) -> dict[str, Any]:
        assert isinstance(params, ProfileParams)
        target = env.config.target(params.target)
        slo = env.config.slo_for(target)  # as the job starts: a reload may rename the target meanwhile
        async with env.lease(target.name) as client:
            await model_of(client)
            lengths, left_out = _fitting(params, await served_context(client), target, ctx)
            planned, limit = sum(lengths) * params.repeats, env.job_limits().max_tokens
            if planned > limit:
                raise JobFailedError(
                    f"the profile would send {planned} prompt tokens; jobs.limits.max_tokens is {limit}"
                )
            wanted = ShardsWanted(workers=params.workers, local=PROFILE_POOL)
            async with job_shards(wanted, env, client) as pool:
                await env.wait_idle(target.name)  # in isolation: nothing else of ours in flight
                profile = await profile_prefill(
                    client.send if pool is None else one_at_a_time(pool, client.settings),
                    ProfileRequests(prompt_builder(target), target.api, lengths, params.repeats),
                    _sample_reporter(ctx, len(lengths)),
                    lambda stopped: ctx.keep_result({"target": target.name, **stopped.to_dict()}),
                )  # fmt: skip
        if profile.model is None:
            raise JobFailedError("no prompt length got an answer; see the steps for each length's outcomes")
        fitted = profile.model.sample_count
        note = constant_note(profile.model)
        message = f"fitted over {fitted} length{'s' * (fitted != 1)}: {profile.model.formula()}"
        overridden = profile_overridden(slo, target.slo) if params.apply else None
        applied = params.apply and overridden is None
        warning = bare_prefill_warning(slo, target.slo) if applied else None
        if params.apply:
            env.store_profile(target.name, profile)  # kept: it sets Dp once the SLO leaves Dp to profiles
        said = [message, *(part for part in (note, warning) if part)]
        ctx.progress(1.0, "; ".join(said) + _not_applied(overridden))
        return {
            "target": target.name, "applied": applied, "not_applied_because": overridden,
            "warning": warning, "left_out_lengths": left_out, **shards_used(pool), **profile.to_dict(),
        }  # fmt: skip

    return run


def _not_applied(overridden: str | None) -> str:
    return f"; stored, not applied: {overridden}" if overridden is not None else ""


def _fitting(
    params: ProfileParams, context: int | None, target: Target, ctx: JobContext
) -> tuple[tuple[int, ...], list[int]]:
    """The lengths that fit the context the target serves, as the ``profile`` command cuts them (a
    longer one only collects the server's refusals), and those left out (said in the progress)."""
    lengths, left_out = fit_ladder(params.lengths, context, exact=target.simulated)
    if left_out:
        ctx.progress(0.0, left_out_note(left_out, context))
    return lengths, left_out


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
