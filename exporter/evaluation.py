"""Evaluation core: from recorded probe results to the arrays every figure is computed from.

``measure`` turns the completed requests into the arrays ``exporter.stats`` works on (intervals, prompt
lengths, measured end-to-end times, fluidity per decode tier) under an ``EvaluationSpec`` (the
``DeadlinePolicy`` that sets each request's deadlines, SLOs, goodput bounds). The one-shot report
(``exporter.report``), the daemon's rolling windows (``exporter.exposition``) and the jobs' trials
(``exporter.jobs``) all evaluate through here, so a figure means the same wherever it is shown. Pure
functions, no I/O. Only completed streams (``ok``, and ``truncated`` ones that did stream tokens) are
measured.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from exporter.settings.slo import Slo
from exporter.stats.accounting import FluidityBatch
from exporter.stats.batch import FloatArray, IntervalBatch
from exporter.stats.fluidity import evaluate
from exporter.stats.latency import LatencyBatch, latency_batch
from exporter.stats.objectives import (
    DECODE_TIERS,
    DEFAULT_DECODE_TIER,
    DEFAULT_PERCENTILE,
    DEFAULT_PREFILL_DEADLINE_S,
    DEFAULT_TARGET_FLUIDITY,
    GoodputBounds,
    Objective,
    SloMetric,
)
from exporter.stats.prefill import PrefillModel
from exporter.streams.result import Outcome, ProbeResult, intervals

COMPLETED = (Outcome.OK, Outcome.TRUNCATED)


@dataclass(frozen=True)
class DeadlinePolicy:
    """How each request's deadlines are set: ``Dp`` from a profiled model (plus slack) or a constant."""

    prefill_deadline: float = DEFAULT_PREFILL_DEADLINE_S
    prefill_model: PrefillModel | None = None
    scheduling_slack: float = 0.0
    decode_tiers: Mapping[str, float] = field(default_factory=lambda: dict(DECODE_TIERS))
    target_fluidity: float = DEFAULT_TARGET_FLUIDITY
    percentile: float = DEFAULT_PERCENTILE

    def prefill_deadlines(self, prompt_tokens: FloatArray) -> FloatArray:
        """``Dp`` per request; without a model, the constant (the prompt length is then unused)."""
        if self.prefill_model is None:
            return np.full(len(prompt_tokens), self.prefill_deadline)
        return np.asarray(self.prefill_model.deadline(prompt_tokens, self.scheduling_slack), dtype=np.float64)

    def describe(self) -> dict[str, Any]:
        """The policy as plain data, for the report."""
        prefill: dict[str, Any] = (
            {"kind": "constant", "seconds": self.prefill_deadline}
            if self.prefill_model is None
            else {
                "kind": "model",
                "model": self.prefill_model.to_dict(),
                "scheduling_slack": self.scheduling_slack,
            }
        )
        return {
            "prefill": prefill,
            "decode_tiers": dict(self.decode_tiers),
            "target_fluidity": self.target_fluidity,
            "percentile": self.percentile,
        }

    @classmethod
    def of(cls, slo: Slo) -> DeadlinePolicy:
        """The deadlines an SLO sets, however it was given (config, flags)."""
        return cls(
            prefill_deadline=slo.prefill_deadline_s,
            prefill_model=slo.prefill_model,
            scheduling_slack=slo.scheduling_slack_s,
            decode_tiers=dict(slo.decode_tiers),
            target_fluidity=slo.target_fluidity,
            percentile=slo.percentile,
        )


@dataclass(frozen=True)
class EvaluationSpec:
    """What a report evaluates besides the standard figures."""

    deadlines: DeadlinePolicy = field(default_factory=DeadlinePolicy)
    slos: tuple[Objective, ...] = ()
    goodput: GoodputBounds | None = None
    from_scheduled: bool = False  # charge the client's send lateness to the request (open-loop honesty)

    @classmethod
    def of(
        cls, slo: Slo, *, deadlines: DeadlinePolicy | None = None, from_scheduled: bool = False
    ) -> EvaluationSpec:
        """Everything ``measure`` needs to evaluate results under ``slo``; ``deadlines`` in place of the
        SLO's own where they were resolved apart (the daemon's, with a target's prefill profile)."""
        policy = DeadlinePolicy.of(slo) if deadlines is None else deadlines
        return cls(policy, slo.objectives, slo.goodput, from_scheduled)


@dataclass(frozen=True, eq=False)
class Measured:
    """The completed requests as arrays: intervals, latency metrics, and fluidity per decode tier."""

    results: tuple[ProbeResult, ...]
    batch: IntervalBatch
    latency: LatencyBatch
    prompt_tokens: FloatArray
    prefill_deadlines: FloatArray
    tiers: dict[str, FluidityBatch]


def completed(results: Sequence[ProbeResult]) -> list[ProbeResult]:
    """Requests whose stream completed with at least one token."""
    return [r for r in results if r.outcome in COMPLETED and r.token_times]


def measure(results: Sequence[ProbeResult], spec: EvaluationSpec) -> Measured:
    """Intervals, latency and fluidity of the completed requests."""
    done = tuple(completed(results))
    batch = IntervalBatch.from_sequences(intervals(r, from_scheduled=spec.from_scheduled) for r in done)
    e2e = np.array([e2e_seconds(r, spec.from_scheduled) for r in done], dtype=np.float64)
    prompts = np.array([_prompt_tokens(r) for r in done], dtype=np.float64)
    prefill = spec.deadlines.prefill_deadlines(np.nan_to_num(prompts))
    tiers = {name: evaluate(batch, prefill, dd) for name, dd in spec.deadlines.decode_tiers.items()}
    return Measured(done, batch, latency_batch(batch, e2e=e2e), prompts, prefill, tiers)


def e2e_seconds(result: ProbeResult, from_scheduled: bool) -> float:
    """End-to-end seconds from the send (or the scheduled time, open-loop), NaN when not recorded."""
    start = result.scheduled_at if from_scheduled and result.scheduled_at is not None else result.sent_at
    if start is None or result.finished_at is None:
        return math.nan  # latency_batch then falls back to the sum of the intervals
    return max(result.finished_at - start, 0.0)


def _prompt_tokens(result: ProbeResult) -> float:
    known = result.prompt_tokens_reported or result.prompt_tokens_intended
    return float(known) if known is not None else math.nan


def metric_values(measured: Measured, tier: str | None) -> dict[SloMetric, FloatArray]:
    """Per-request values by SLO metric; fluidity at ``tier`` (the first tier when None)."""
    latency = measured.latency
    name = tier or next(iter(measured.tiers), None)
    fluidity = measured.tiers[name].fluidity if name else np.zeros(0)
    return {
        SloMetric.TTFT: latency.ttft,
        SloMetric.TBT: latency.max_tbt,
        SloMetric.TPOT: latency.tpot,
        SloMetric.E2E: latency.e2e,
        SloMetric.NORMALIZED_LATENCY: latency.normalized_latency,
        SloMetric.FLUIDITY: fluidity,
    }


def slo_tier(policy: DeadlinePolicy) -> str | None:
    """The tier fluidity SLOs and goodput are judged at: the default tier ("medium") when configured,
    else the first."""
    if DEFAULT_DECODE_TIER in policy.decode_tiers:
        return DEFAULT_DECODE_TIER
    return next(iter(policy.decode_tiers), None)
