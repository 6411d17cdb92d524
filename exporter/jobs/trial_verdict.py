"""The verdict of one capacity trial: a pure function of its results (``judge``) and the SLO it is
judged at (``TrialSlo``); and the trial's report (``TrialReport``): its verdict with what it cost.

A request counts against the SLO when it failed (error, timeout, no tokens) or its fluidity-index at
``Dp``/``Dd`` is below the target; the trial passes when at least ``percentile`` % of its measured
requests count for it and every added objective and goodput floor holds. That point verdict steers the
search; beside it the trial reports the confidence interval of its pass fraction
(``exporter.stats.binomial``, at ``TrialSlo.confidence``) and a statistical verdict: pass, fail, or
inconclusive when the interval straddles the objective. Each trial also reports its headroom: how much
tighter every deadline could be and still pass (``exporter.stats.headroom``).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from exporter.evaluation import COMPLETED, DeadlinePolicy, EvaluationSpec, measure, metric_values
from exporter.settings.slo import TRIAL_TIER, Slo
from exporter.stats.accounting import FluidityOptions
from exporter.stats.batch import FloatArray
from exporter.stats.binomial import DEFAULT_CONFIDENCE, classify_fraction, clopper_pearson_interval
from exporter.stats.binomial import Verdict as BinomialVerdict
from exporter.stats.distribution import nearest_rank
from exporter.stats.engine_model import decode_bins
from exporter.stats.fluidity import fluid_token_rate
from exporter.stats.fluidity_engines import loop_request
from exporter.stats.headroom import (
    allowed_failures,
    deadline_headroom,
    give_up_wait,
    required_scales,
)
from exporter.stats.objectives import (
    GoodputBounds,
    Objective,
    SloMetric,
    evaluate_objectives,
    goodput,
    with_failed,
)
from exporter.streams.result import ProbeResult, intervals

SHARDS_REASON = "shards"  # a sharded trial whose shards made the load other than planned
NO_DATA_REASON = "no data"  # a trial that measured no request (it ended before its warm-up did)
ERRORS_REASON = "errors"  # more requests failed than the SLO allows: the failures alone sank it
# Requests alone in flight that must miss, confidently, before a search believes the SLO fails with the
# engine idle: one is no pattern (the first request after a drain may pay a cold start no other pays).
MIN_ALONE = 2
STOPPED_EARLY = ("early_stop", "cannot_settle")  # ``ended_by`` of a trial its own tally stopped


@dataclass(frozen=True)
class TrialSlo:
    """A capacity trial's judge: the job's SLO (``SloSpec.applied_to`` its target's) with every
    deadline resolved, ``Dp`` from a prefill profile where the SLO leaves it to one."""

    deadlines: DeadlinePolicy  # Dp: the profiled model (plus slack) or a constant
    decode_deadline: float
    slo: Slo = field(default_factory=Slo)  # the fluidity target and percentile, objectives and goodput bounds
    min_goodput_ratio: float | None = None  # with the SLO's goodput: the share that must meet every bound
    confidence: float = DEFAULT_CONFIDENCE  # of a trial's pass-fraction interval (Clopper-Pearson)

    @property
    def target_fluidity(self) -> float:
        return self.slo.target_fluidity

    @property
    def percentile(self) -> float:
        return self.slo.percentile

    @property
    def objectives(self) -> tuple[Objective, ...]:
        return self.slo.objectives

    @property
    def goodput(self) -> GoodputBounds | None:
        return self.slo.goodput

    @property
    def required(self) -> float:
        """The share of requests that must reach the target fluidity."""
        return self.percentile / 100.0

    def describe(self) -> dict[str, Any]:
        prefill = self.deadlines.describe()["prefill"]
        return {
            "rule": f"{self.percentile:g}% of requests reach fluidity >= {self.target_fluidity:g}",
            "prefill_deadline": prefill,
            "decode_deadline_s": self.decode_deadline,
            "target_fluidity": self.target_fluidity,
            "percentile": self.percentile,
            "objectives": [str(slo) for slo in self.objectives],
            "goodput": None if self.goodput is None else vars(self.goodput),
            "min_goodput_ratio": self.min_goodput_ratio,
            "confidence": self.confidence,
        }

    def request_fails(self, result: ProbeResult) -> bool:
        """Whether one finished request counts against the SLO (the early-stopping test)."""
        if result.outcome not in COMPLETED or not result.token_times:
            return True
        gaps = intervals(result, from_scheduled=True)
        fluidity = loop_request(gaps, self._prefill_deadline(result), self.decode_deadline, FluidityOptions())
        return bool(fluidity.fluidity < self.target_fluidity)

    def give_up_after(self, result: ProbeResult) -> float:
        """Seconds after its scheduled send beyond which a request still without a first token can no
        longer reach the target fluidity (``exporter.stats.headroom.give_up_wait``)."""
        most_tokens = result.max_tokens or 1
        return give_up_wait(
            self._prefill_deadline(result), self.decode_deadline, most_tokens, self.target_fluidity
        )

    def _prefill_deadline(self, result: ProbeResult) -> float:
        prompt = result.prompt_tokens_reported or result.prompt_tokens_intended or 0
        return float(self.deadlines.prefill_deadlines(np.array([float(prompt)]))[0])


@dataclass(frozen=True)
class Verdict:
    """How a trial fared: pass/fail, why, its headroom and the figures behind them."""

    passed: bool
    reason: str  # "pass", "slo", "errors" (failed requests alone sank it), "no data", "shards"
    headroom: float
    figures: dict[str, Any]


def judge(
    results: Sequence[ProbeResult],
    slo: TrialSlo,
    given_up: Sequence[float] = (),
    *,
    closed_loop: bool = False,
    sent: Sequence[ProbeResult] | None = None,
) -> Verdict:
    """The verdict over the measured requests (pure).

    ``given_up``: for a trial stopped early, the unfinished requests whose first token did not come
    by the point where they could still reach the target; each value is a lower bound on the factor
    its deadlines would need (wait / give-up wait). They count as failed, and their bound enters the headroom: left
    out, the headroom of a stopped trial would only see the requests that were quick enough to finish.
    ``closed_loop``: the trial held a concurrency, so its rate is the one its slots achieved
    (``offered_rate``). ``sent``: for a trial cut short, every measured request it sent, finished or
    not: an open loop offered its rate to all of them, and the sends of those that came back alone give
    another (1.15 req/s at 1 req/s, and a goodput above the load).
    """
    if not results and not given_up:
        return Verdict(False, NO_DATA_REASON, math.nan, {"requests": 0})
    duration_s = measured_span(results) if results else math.nan
    # One decode tier, the trial's: ``measure`` evaluates every tier of the policy it is given.
    deadlines = dataclasses.replace(slo.deadlines, decode_tiers={TRIAL_TIER: slo.decode_deadline})
    done = measure(results, EvaluationSpec(deadlines, slo.objectives, slo.goodput, from_scheduled=True))
    values = metric_values(done, TRIAL_TIER)
    errors = len(results) - len(done.results)
    failed = errors + len(given_up)
    fluidity = values[SloMetric.FLUIDITY]
    scores = np.concatenate([fluidity, np.zeros(failed)])  # a failed request met no deadline
    fluid_share = float(np.mean(scores >= slo.target_fluidity))
    needed = len(scores) - allowed_failures(len(scores), slo.percentile)
    checks = [int(np.count_nonzero(scores >= slo.target_fluidity)) >= needed]
    headrooms = [_fluidity_headroom(done, errors, given_up, slo)]
    objective_rows = _objectives(values, failed, slo)
    checks += [row["met"] for row in objective_rows]
    headrooms += [row["headroom"] for row in objective_rows]
    offered = offered_rate(results if sent is None or closed_loop else sent, closed_loop=closed_loop)
    good = _goodput(values, len(scores), slo, offered)
    if good["met"] is not None:
        checks.append(good["met"])
        headrooms.append(good["headroom"])
    passed = all(checks)
    fluid = int(np.count_nonzero(scores >= slo.target_fluidity))
    figures = {
        "requests": len(scores),
        "fluid_requests": fluid,
        **_statistics(fluid, len(scores), all(checks[1:]), slo),
        "duration_s": duration_s,
        "completed": len(done.results),
        "failed": failed,
        "unreliable": sum(r.unreliable for r in results),  # timings the client itself distrusts
        "outcomes": dict(Counter(r.outcome.value for r in results)),
        "fluid_share": fluid_share,
        "fluidity_at_percentile": nearest_rank(scores, slo.percentile / 100.0, largest=True),
        "fluid_token_rate": _fluid_rate(done, slo),
        "offered_rate_per_s": offered,
        "fluid_goodput_tokens_per_s": _fluid_goodput_tokens(
            done.results, fluidity, len(scores), slo, offered
        ),
        "objectives": objective_rows,
        "goodput": good,
        "engine": engine_figures(done.results),
    }
    return Verdict(passed, _reason(passed, errors, len(scores), slo), min(headrooms), figures)


def engine_figures(completed: Sequence[ProbeResult]) -> dict[str, Any]:
    """What the engine model (``exporter.stats.engine_model``) needs of a trial: its decode gaps binned
    by the streams decoding at each, and the output tokens per completed request."""
    streams = [(r.token_times, r.token_counts) for r in completed]
    tokens = [r.output_tokens for r in completed]
    return {
        "decode": decode_bins(streams).to_dict(),
        "output_tokens": float(np.mean(tokens)) if tokens else None,
    }


def _statistics(fluid: int, total: int, others_met: bool, slo: TrialSlo) -> dict[str, Any]:
    """The pass fraction's confidence interval and the verdict it supports (any other objective
    missed makes it a failure, judged as a point)."""
    if total == 0:
        return {"pass_interval": None, "verdict": "fail"}
    bounds = clopper_pearson_interval(fluid, total, slo.confidence)
    verdict = classify_fraction(fluid, total, slo.required, slo.confidence) if others_met else "fail"
    return {"pass_interval": [bounds.low, bounds.high], "verdict": str(verdict)}


def offered_rate(results: Sequence[ProbeResult], *, closed_loop: bool = False) -> float:
    """Requests per second as sent: (n - 1) over the span from the first measured send to the last
    (scheduled times for an open loop). NaN with fewer than two sends.

    A closed loop offers what its slots achieve: its first requests leave together (at a concurrency
    near the trial's request count, nearly all of them: the span of sends is then ~0 and their rate
    meaningless), so its rate is the measured requests over the span from the first send to the last
    end."""
    if closed_loop:
        span = measured_span(results) if results else math.nan
        return len(results) / span if span > 0.0 else math.nan
    starts = sorted(
        t
        for t in (r.scheduled_at if r.scheduled_at is not None else r.sent_at for r in results)
        if t is not None
    )
    if len(starts) < 2 or starts[-1] <= starts[0]:
        return math.nan
    return (len(starts) - 1) / (starts[-1] - starts[0])


def _fluid_goodput_tokens(
    completed: Sequence[ProbeResult], fluidity: FloatArray, total: int, slo: TrialSlo, offered: float
) -> float:
    """Output tokens per second of the requests that met the target: their tokens per measured request
    times the offered rate (the tokens a steady stream at this load serves within the SLO)."""
    if total == 0 or not math.isfinite(offered):
        return math.nan
    tokens = sum(
        r.output_tokens for r, f in zip(completed, fluidity.tolist(), strict=True) if f >= slo.target_fluidity
    )
    return tokens / total * offered


def measured_span(results: Sequence[ProbeResult]) -> float:
    """Seconds from the first measured request's scheduled send to the last one's end."""
    starts = [r.scheduled_at if r.scheduled_at is not None else r.sent_at for r in results]
    ends = [r.finished_at for r in results if r.finished_at is not None]
    known = [t for t in starts if t is not None]
    return max(max(ends) - min(known), 0.0) if known and ends else math.nan


def _fluidity_headroom(done: Any, errors: int, given_up: Sequence[float], slo: TrialSlo) -> float:
    scales = required_scales(done.batch, done.prefill_deadlines, slo.decode_deadline, slo.target_fluidity)
    every = np.concatenate([scales, np.full(errors, math.inf), np.asarray(given_up, dtype=np.float64)])
    return deadline_headroom(every, slo.percentile)


def _objectives(values: Mapping[SloMetric, FloatArray], failed: int, slo: TrialSlo) -> list[dict[str, Any]]:
    """Each added objective, per request (TBT: each request's longest gap, as goodput bounds it)."""
    if not slo.objectives:
        return []
    rows = []
    for result in evaluate_objectives(slo.objectives, with_failed(values, failed)):
        rows.append(
            {
                "slo": str(result.objective),
                "observed": result.observed,
                "met": result.met,
                "headroom": _ratio_headroom(
                    result.observed, result.threshold, result.objective.metric.higher_is_better
                ),
            }
        )
    return rows


def _ratio_headroom(observed: float, threshold: float, higher_is_better: bool) -> float:
    """How far an objective is from its bound, as a factor (>= 1 when met)."""
    if math.isnan(observed):
        return 0.0
    if higher_is_better:
        return observed / threshold if threshold > 0 else math.inf
    if observed <= 0:
        return math.inf
    return threshold / observed


def _goodput(
    values: Mapping[SloMetric, FloatArray], total: int, slo: TrialSlo, offered: float
) -> dict[str, Any]:
    """Requests meeting every goodput bound (without bounds: fluid requests), of all measured ones;
    a check only with ``min_goodput_ratio``. Its rate is per second of offered load: the ratio times
    the rate the requests were sent at (over the span from first to last end, as it once was, the
    drain of the last requests diluted it: 6.5 req/s at a capacity of 11.2 with every request good)."""
    bounds = slo.goodput or GoodputBounds(min_fluidity=slo.target_fluidity)
    completed = len(values[SloMetric.FLUIDITY])
    good = goodput(bounds, values, 1.0).good if completed else 0
    ratio = good / total if total else 0.0
    floor = slo.min_goodput_ratio
    return {
        "bounds": {k: v for k, v in vars(bounds).items() if v is not None},
        "good": good,
        "total": total,
        "ratio": ratio,
        "rate_per_s": ratio * offered if total else math.nan,
        "min_ratio": floor,
        "met": None if floor is None else ratio >= floor,
        "headroom": None if floor is None else _ratio_headroom(ratio, floor, True),
    }


def _fluid_rate(done: Any, slo: TrialSlo) -> float | None:
    if not (done.batch.lengths >= 2).any():
        return None
    rate = fluid_token_rate(done.batch, slo.target_fluidity, slo.percentile)
    return rate if math.isfinite(rate) else None


def _reason(passed: bool, failed: int, total: int, slo: TrialSlo) -> str:
    if passed:
        return "pass"
    return ERRORS_REASON if failed > allowed_failures(total, slo.percentile) else "slo"


@dataclass(frozen=True)
class TrialCost:
    """What a trial spent: the requests it started, its seconds, the tokens the target spent on it."""

    sent: int
    duration_s: float
    tokens: int


@dataclass
class TrialReport:
    """What a trial did and what it showed."""

    index: int
    load: float
    passed: bool
    reason: str
    headroom: float
    figures: dict[str, Any]
    requests_sent: int
    duration_s: float
    tokens: int
    stopped_early: bool = False
    planned: int = 0  # measured requests planned
    # "requests" (all sent and done), "duration" (the trial duration ended the sends, the rest done),
    # "early_stop", "cannot_settle", "time_limit"
    ended_by: str = "requests"
    drain_wait_s: float = 0.0  # waited for a drained engine before it
    drained_by: str | None = None  # how that wait ended (``exporter.jobs.capacity_loop.Drained.how``)
    # Why the search did not steer on it and ran its load again (its timings distrusted), or None
    set_aside: str | None = None

    @classmethod
    def of(
        cls, index: int, load: float, verdict: Verdict, cost: TrialCost, ended_by: str = "requests"
    ) -> TrialReport:
        """A report from a trial's verdict, what it cost and how its sends ended."""
        return cls(
            index, load, verdict.passed, verdict.reason, verdict.headroom, verdict.figures, cost.sent,
            cost.duration_s, cost.tokens, ended_by in STOPPED_EARLY, ended_by=ended_by,
        )  # fmt: skip

    def counts(self) -> tuple[int, int] | None:
        """(requests that met the target, requests) for the pass-fraction interval. A trial stopped
        early counts as if every request it did not wait for had met the target: the stop rule made
        it a confident failure even then. One stopped because it could no longer settle a pass counts
        only what it saw: counting the rest as met would lean towards the pass it could not show."""
        total, fluid = self.figures.get("requests"), self.figures.get("fluid_requests")
        if not isinstance(total, int) or not isinstance(fluid, int) or total == 0:
            return None
        if self.ended_by == "early_stop" and self.planned > total:
            return self.planned - (total - fluid), self.planned
        return fluid, total

    def fails_alone(self) -> tuple[int, int] | None:
        """(missed, requests) of the measured requests that had the engine to themselves (nothing else
        of ours in flight, ``Tally.alone``) when at least ``MIN_ALONE`` of them were and they confidently
        missed the SLO; else None. A lower load can only leave more requests alone, no faster: the SLO
        is then met at no load (``capacity_search``'s floor)."""
        alone = self.figures.get("alone") or {}
        requests, missed = alone.get("requests"), alone.get("missed")
        if not isinstance(requests, int) or not isinstance(missed, int) or requests < MIN_ALONE:
            return None
        return (missed, requests) if alone.get("verdict") == str(BinomialVerdict.FAIL) else None

    def objectives_met(self) -> bool:
        """Every objective besides the fluidity percentile held (goodput floor included)."""
        rows = self.figures.get("objectives") or []
        good = (self.figures.get("goodput") or {}).get("met")
        return all(row.get("met") for row in rows) and good is not False

    @property
    def verdict(self) -> str:
        """ "pass", "fail" or "inconclusive" (the pass fraction's interval against the objective)."""
        return str(self.figures.get("verdict") or ("pass" if self.passed else "fail"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "load": self.load,
            "passed": self.passed,
            "reason": self.reason,
            "headroom": _json_number(self.headroom),
            "requests_sent": self.requests_sent,
            "duration_s": self.duration_s,
            "tokens": self.tokens,
            "stopped_early": self.stopped_early,
            "planned": self.planned,
            "ended_by": self.ended_by,
            "drain_wait_s": self.drain_wait_s,
            "drained_by": self.drained_by,
            "set_aside": self.set_aside,
            "verdict": self.verdict,
            "figures": _json_ready(self.figures),
        }


def _json_number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _json_ready(value: Any) -> Any:
    if isinstance(value, float):
        return _json_number(value)
    if isinstance(value, dict):
        return {k: _json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_ready(v) for v in value]
    if isinstance(value, np.generic):
        return _json_ready(value.item())
    return value
