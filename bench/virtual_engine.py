"""Capacity trials on the simulator's engine with a virtual clock: the test bed of the search (not part
of the package: ``bench/capacity_bench.py`` and the capacity tests use it).

The built-in simulator's scheduler and cost model (``exporter.sim.engine``) run here without sockets and
without waiting: a trial of a few hundred requests takes milliseconds, so the benchmark can afford a
dense sweep of loads as ground truth and the tests can compare searches deterministically. The results
are ``ProbeResult`` objects stamped with virtual times, judged by exactly the code that judges live
trials (``exporter.jobs.trial_verdict.judge``). Open loop (rates) only.

A trial's time limit (``TrialPlan.time_limit_s``) ends it on the virtual clock as it would end a live
one. Early stopping is replayed exactly: each measured request is certain to fail at its finish (a failed or
non-fluid request) or at the end of its give-up wait (no first token by then), whichever comes first;
the trial ends at the moment the rule is met, so it spends only the prompts sent and the output tokens
generated before then, and is judged on what a live trial would have seen at that moment.
"""

from __future__ import annotations

import dataclasses
import math

from exporter.jobs.trial import ABOVE_ONE, TrialPlan, give_up_bound, stop_reason
from exporter.jobs.trial_verdict import TrialCost, TrialReport, TrialSlo, judge
from exporter.sim.engine import Emission, Engine, SimRequest, run_virtual
from exporter.sim.engine_presets import Preset
from exporter.streams.result import Outcome, ProbeResult


def engine_for(preset: Preset, *, chunked_prefill: bool | None = None) -> Engine:
    """A fresh engine of ``preset`` (optionally with chunked prefill switched on or off)."""
    params = preset.engine
    if chunked_prefill is not None:
        params = dataclasses.replace(params, chunked_prefill=chunked_prefill)
    return Engine(params, preset.cost)


def simulate(engine: Engine, plan: TrialPlan) -> list[ProbeResult]:
    """Every request of ``plan`` through ``engine`` on a virtual clock starting at 0."""
    if plan.offsets is None:
        raise ValueError("virtual trials are open loop: the plan needs arrival offsets")
    results: dict[int, ProbeResult] = {}
    requests: dict[int, int] = {}
    arrivals = []
    for index, (offset, spec) in enumerate(zip(plan.offsets.tolist(), plan.specs, strict=True)):
        prompt = spec.prompt_tokens or 1
        request = SimRequest(prompt, spec.max_tokens, "length", offset, seed=index)
        requests[id(request)] = index
        results[index] = ProbeResult(
            api="completions",
            scheduled_at=offset,
            sent_at=offset,
            max_tokens=spec.max_tokens,
            prompt_tokens_intended=prompt,
            prompt_tokens_reported=prompt,
            extra={"measured": index >= plan.warmup},
        )
        arrivals.append((offset, request))

    def on_emission(at: float, emission: Emission) -> None:
        result = results[requests[id(emission.request)]]
        result.token_times.append(at)
        result.token_counts.append(emission.tokens)
        if emission.finished:
            result.finished_at = at
            result.completion_tokens_reported = result.output_tokens

    def on_reject(at: float, request: SimRequest) -> None:
        result = results[requests[id(request)]]
        result.outcome, result.http_status, result.finished_at = Outcome.RATE_LIMITED, 429, at

    run_virtual(engine, arrivals, on_emission, on_reject)
    return [results[i] for i in range(len(plan.specs))]


def virtual_trial(index: int, plan: TrialPlan, slo: TrialSlo, engine: Engine) -> TrialReport:
    """Run ``plan`` on ``engine`` and judge it as a live trial would be judged."""
    results = simulate(engine, plan)
    measured = [r for r in results if r.extra["measured"]]
    decision = _decision(measured, plan, slo) if plan.early_stop else None
    stop_at, ended_by = decision if decision is not None else (None, "requests")
    end = max((r.finished_at or 0.0) for r in results) if results else 0.0
    if plan.time_limit_s is not None and min(stop_at or end, end) > plan.time_limit_s:
        stop_at, ended_by = plan.time_limit_s, "time_limit"
    given_up: list[float] = []
    sent_measured: list[ProbeResult] | None = None
    if stop_at is not None:
        end = stop_at
        given_up = [max(give_up_bound(r, end, slo), ABOVE_ONE) for r in measured if _given_up(r, end, slo)]
        sent_measured = [r for r in measured if (r.scheduled_at or 0.0) <= end]
        measured = [r for r in measured if r.finished_at is not None and r.finished_at <= end]
    verdict = judge(measured, slo, given_up, closed_loop=plan.concurrency is not None, sent=sent_measured)
    sent = [r for r in results if (r.scheduled_at or 0.0) <= end]
    tokens = sum(_tokens_by(r, end) for r in sent)
    report = TrialReport.of(index, plan.load, verdict, TrialCost(len(sent), end, tokens), ended_by)
    report.planned = plan.measured
    return report


def _decision(measured: list[ProbeResult], plan: TrialPlan, slo: TrialSlo) -> tuple[float, str] | None:
    """When the live tally would stop the trial, and why (``exporter.jobs.trial.stop_reason``)."""
    moments = sorted(t for t in (_certain_failure(r, slo) for r in measured) if t is not None)
    for count, moment in enumerate(moments, start=1):
        reason = stop_reason(count, plan, slo)
        if reason is not None:
            return moment, reason
    return None


def _certain_failure(result: ProbeResult, slo: TrialSlo) -> float | None:
    """When a watching client would know this request fails (None: it does not)."""
    scheduled = result.scheduled_at or 0.0
    give_up = scheduled + slo.give_up_after(result)
    first = result.token_times[0] if result.token_times else math.inf
    finished = result.finished_at if result.finished_at is not None else math.inf
    if first > give_up and finished > give_up:
        return give_up
    return finished if slo.request_fails(result) else None


def _given_up(result: ProbeResult, now: float, slo: TrialSlo) -> bool:
    """Unfinished at ``now`` and by then certain to fail for want of a first token in time (whether or
    not one came later): the live tally counts these too."""
    unfinished = result.finished_at is None or result.finished_at > now
    moment = _certain_failure(result, slo)
    return unfinished and moment is not None and moment <= now


def _tokens_by(result: ProbeResult, end: float) -> int:
    prompt = result.prompt_tokens_intended or 0
    received = sum(n for at, n in zip(result.token_times, result.token_counts, strict=True) if at <= end)
    return prompt + received
