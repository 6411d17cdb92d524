"""One trial of a capacity search: send a load, judge it against the SLO, stop early once decided.

A trial sends ``warmup`` requests and then ``requests`` measured ones at a fixed load, open-loop at a
rate (an arrival process) or closed-loop at a concurrency. Only the measured requests are judged; the
warm-up brings the engine's batch to its steady state first.

Every trial of a search draws the same request lengths and the same unit-rate arrival gaps (common
random numbers, scaled by ``1 / rate``): trials then differ only in load, so noise in the workload
cannot make a higher load look better than a lower one. Prompt texts still differ per trial, so a
prefix cache cannot answer a later trial from an earlier one.

The verdict (``judge``) is a pure function of the results. A request counts against the SLO when it
failed (error, timeout, no tokens) or its fluidity-index at ``Dp``/``Dd`` is below the target; the
trial passes when at least ``percentile`` % of its measured requests count for it and every added
objective and goodput floor holds. That point verdict steers the search; beside it the trial reports
the confidence interval of its pass fraction (``exporter.stats.binomial``, at ``TrialSlo.confidence``)
and a statistical verdict: pass, fail, or inconclusive when the interval straddles the objective.

With ``early_stop`` a trial ends as soon as its failures make it a *confident* failure even if every
request still to come met the target (``exporter.stats.headroom.decided_failure`` with a confidence):
the same confidence a full trial needs, so two slow requests never decide a verdict. Its remaining
sends are cancelled. A trial also ends at its time limit (``TrialPlan.time_limit_s``); either way the
unfinished requests that already waited too long for a first token count as failed and the others
are left out.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from exporter.evaluation import COMPLETED, DeadlinePolicy, EvaluationSpec, measure, metric_values
from exporter.load.arrivals import parse_arrival_spec
from exporter.load.runner import run_load
from exporter.load.sessions import planned_tokens, session_turns
from exporter.load.workloads import Workload, specs_with_lengths
from exporter.probe.result import ProbeResult, intervals
from exporter.probe.target import RequestSpec
from exporter.stats.accounting import FluidityOptions
from exporter.stats.batch import FloatArray
from exporter.stats.binomial import DEFAULT_CONFIDENCE, classify_fraction, clopper_pearson_interval
from exporter.stats.deadline_loop import loop_request
from exporter.stats.distribution import nearest_rank
from exporter.stats.fluidity import fluid_token_rate
from exporter.stats.headroom import (
    allowed_failures,
    deadline_headroom,
    decided_failure,
    give_up_wait,
    required_scales,
)
from exporter.stats.slo import GoodputBounds, Slo, SloMetric, evaluate_slos, goodput

TRIAL_TIER = "trial"  # the one decode deadline a trial is judged at
SHARDS_REASON = "shards"  # a sharded trial whose shards made the load other than planned
WATCH_INTERVAL_S = 0.05  # how often waiting requests are checked against their give-up wait
StartedSend = Callable[[RequestSpec, float | None, Callable[[ProbeResult], None]], Awaitable[ProbeResult]]


@dataclass(frozen=True)
class TrialSlo:
    """The SLO a trial is judged by, with every deadline resolved."""

    deadlines: DeadlinePolicy  # Dp: the profiled model (plus slack) or a constant
    decode_deadline: float
    target_fluidity: float = 0.9
    percentile: float = 99.0
    objectives: tuple[Slo, ...] = ()
    goodput: GoodputBounds | None = None
    min_goodput_ratio: float | None = None
    confidence: float = DEFAULT_CONFIDENCE  # of a trial's pass-fraction interval (Clopper-Pearson)

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


def judge(results: Sequence[ProbeResult], slo: TrialSlo, given_up: Sequence[float] = ()) -> Verdict:
    """The verdict over the measured requests (pure).

    ``given_up``: for a trial stopped early, the unfinished requests whose first token did not come
    by the point where they could still reach the target; each value is a lower bound on the factor
    its deadlines would need (wait / give-up wait). They count as failed, and their bound enters the headroom: left
    out, the headroom of a stopped trial would only see the requests that were quick enough to finish.
    """
    if not results and not given_up:
        return Verdict(False, "no data", math.nan, {"requests": 0})
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
    offered = offered_rate(results)
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
    }
    return Verdict(passed, _reason(passed, errors, len(scores), slo), min(headrooms), figures)


def _statistics(fluid: int, total: int, others_met: bool, slo: TrialSlo) -> dict[str, Any]:
    """The pass fraction's confidence interval and the verdict it supports (any other objective
    missed makes it a failure, judged as a point)."""
    if total == 0:
        return {"pass_interval": None, "verdict": "fail"}
    bounds = clopper_pearson_interval(fluid, total, slo.confidence)
    verdict = classify_fraction(fluid, total, slo.required, slo.confidence) if others_met else "fail"
    return {"pass_interval": [bounds.low, bounds.high], "verdict": str(verdict)}


def offered_rate(results: Sequence[ProbeResult]) -> float:
    """Requests per second as sent: (n - 1) over the span from the first measured send to the last
    (scheduled times for an open loop). NaN with fewer than two sends."""
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
    # A failed request is as bad as it gets on every metric: infinitely late, fluidity 0.
    padded = {
        metric: np.concatenate(
            [np.asarray(v, dtype=np.float64), np.full(failed, 0.0 if metric.higher_is_better else math.inf)]
        )
        for metric, v in values.items()
    }
    rows = []
    for result in evaluate_slos(slo.objectives, padded):
        rows.append(
            {
                "slo": str(result.slo),
                "observed": result.observed,
                "met": result.met,
                "headroom": _ratio_headroom(
                    result.observed, result.threshold, result.slo.metric.higher_is_better
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
    return "errors" if failed > allowed_failures(total, slo.percentile) else "slo"


# -- running a trial ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TrialPlan:
    """What one trial sends: ``warmup`` + ``requests`` specs, at a rate (offsets) or a concurrency."""

    load: float
    specs: tuple[RequestSpec, ...]
    warmup: int
    offsets: np.ndarray | None = None  # open loop: absolute send offsets (s) of every spec
    concurrency: int | None = None  # closed loop
    duration_s: float | None = None
    early_stop: bool = True
    time_limit_s: float | None = None  # the trial ends after this long, whatever is in flight

    @property
    def measured(self) -> int:
        """Measured requests: every turn of the measured sessions."""
        return session_turns(self.specs[self.warmup :])

    @property
    def planned_tokens(self) -> int:
        """An upper bound on the tokens the trial can spend: every prompt (a session's turns re-send
        the conversation) and every allowed output."""
        return sum(planned_tokens(s) for s in self.specs)


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
    ended_by: str = "requests"  # "requests" (all sent and done), "early_stop" or "time_limit"
    drain_wait_s: float = 0.0  # waited for a drained engine before it
    drained_by: str | None = None  # how that wait ended (``exporter.jobs.drain.Drained.how``)

    @classmethod
    def of(
        cls, index: int, load: float, verdict: Verdict, sent: int, duration_s: float, tokens: int, early: bool
    ) -> TrialReport:
        """A report from a trial's verdict and what it cost."""
        return cls(
            index, load, verdict.passed, verdict.reason, verdict.headroom, verdict.figures, sent, duration_s,
            tokens, early, ended_by="early_stop" if early else "requests",
        )  # fmt: skip

    def counts(self) -> tuple[int, int] | None:
        """(requests that met the target, requests) for the pass-fraction interval. A trial stopped
        early counts as if every request it did not wait for had met the target: the stop rule made
        it a confident failure even then."""
        total, fluid = self.figures.get("requests"), self.figures.get("fluid_requests")
        if not isinstance(total, int) or not isinstance(fluid, int) or total == 0:
            return None
        if self.ended_by == "early_stop" and self.planned > total:
            return self.planned - (total - fluid), self.planned
        return fluid, total

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
            "verdict": self.verdict,
            "figures": _json_ready(self.figures),
        }


@dataclass
class Tally:
    """Results as they finish, the started ones (for their tokens), and the early-stop verdict."""

    plan: TrialPlan
    slo: TrialSlo
    started: list[ProbeResult] = field(default_factory=list)
    measured: list[ProbeResult] = field(default_factory=list)
    failed: set[int] = field(default_factory=set)  # id() of measured requests certain to fail
    decided: asyncio.Event = field(default_factory=asyncio.Event)

    def on_result(self, result: ProbeResult) -> None:
        if not result.extra.get("measured"):
            return
        self.measured.append(result)
        if id(result) not in self.failed and self.slo.request_fails(result):
            self._failed(result)

    def check_waiting(self, now: float) -> None:
        """Count the requests that have waited for their first token past all hope."""
        for result in self.waiting():
            waited = now - (result.scheduled_at or now)
            if id(result) not in self.failed and waited > self.slo.give_up_after(result):
                self._failed(result)

    def waiting(self) -> list[ProbeResult]:
        """Measured requests in flight with no token yet."""
        return [
            r for r in self.started if r.extra.get("measured") and r.finished_at is None and not r.token_times
        ]

    def given_up(self, now: float) -> list[float]:
        """Lower bounds on the deadline factor of the unfinished measured requests certain to fail: no
        first token by their give-up wait. One whose first token came after it counts too: left out,
        a stopped trial could be judged on its quick requests alone and pass."""
        finished = {id(r) for r in self.measured}
        unfinished = (r for r in self.started if r.extra.get("measured") and id(r) not in finished)
        bounds = [(r, give_up_bound(r, now, self.slo)) for r in unfinished]
        return [max(b, ABOVE_ONE) for r, b in bounds if b > 1.0 or id(r) in self.failed]

    def tokens(self) -> int:
        """Tokens the target spent on us: every prompt sent, every output token received (cancelled
        requests included)."""
        return sum(
            (r.prompt_tokens_reported or r.prompt_tokens_intended or 0) + r.output_tokens
            for r in self.started
        )

    def _failed(self, result: ProbeResult) -> None:
        self.failed.add(id(result))
        if self.plan.early_stop and decided_failure(
            len(self.failed), self.plan.measured, self.slo.percentile, self.slo.confidence
        ):
            self.decided.set()


ABOVE_ONE = math.nextafter(1.0, math.inf)  # the factor of a request certain to fail is above 1


def give_up_bound(result: ProbeResult, now: float, slo: TrialSlo) -> float:
    """Wait for the first token (up to ``now`` if none yet) over the give-up wait: above 1, a lower bound
    on the factor the request's deadlines would need (the give-up wait scales with the deadlines)."""
    first = result.token_times[0] if result.token_times else now
    return (min(first, now) - (result.scheduled_at or now)) / slo.give_up_after(result)


def plan_trial(
    workload: Workload,
    load: float,
    *,
    concurrency: bool,
    arrival: str,
    warmup: int,
    requests: int,
    seed: int,
    salt: int,
    duration_s: float | None = None,
    early_stop: bool = True,
    time_limit_s: float | None = None,
) -> TrialPlan:
    """The specs and schedule of a trial at ``load``: the same lengths and unit-rate gaps for every
    trial of a search (``seed``), unique prompt texts per trial (``salt``)."""
    rng = np.random.default_rng(seed)
    if workload.sessions:  # sessions of warmup, then of measured requests; the same lengths every trial
        warm = workload.sample(warmup, rng)
        specs = warm + workload.sample(requests, rng)
        warmup = len(warm)
    else:
        prompts, outputs = workload.sample_lengths(warmup + requests, rng)
        specs = specs_with_lengths(
            workload, list(zip(prompts.tolist(), outputs.tolist(), strict=True)), salt=salt
        )
    if concurrency:
        return TrialPlan(load, tuple(specs), warmup, None, int(load), duration_s, early_stop, time_limit_s)
    unit = parse_arrival_spec(f"{arrival}:rate=1" if ":" not in arrival else f"{arrival},rate=1")
    offsets = unit.offsets(len(specs), np.random.default_rng(seed + 1)) / load
    return TrialPlan(load, tuple(specs), warmup, offsets, None, duration_s, early_stop, time_limit_s)


async def run_trial(
    index: int,
    plan: TrialPlan,
    slo: TrialSlo,
    send: StartedSend,
    on_result: Callable[[ProbeResult], None] | None = None,
) -> TrialReport:
    """Send ``plan`` through ``send(spec, scheduled_at, on_start)`` and judge it (``on_result``: each
    result as it comes, for progress)."""
    tally = Tally(plan, slo)
    # By session: a warm-up session's later turns are warm-up too (single requests are their own).
    warm = {spec.session or spec.request_id or id(spec) for spec in plan.specs[: plan.warmup]}

    async def tracked_send(spec: RequestSpec, scheduled_at: float | None) -> ProbeResult:
        def started(result: ProbeResult) -> None:
            result.extra["measured"] = (spec.session or spec.request_id or id(spec)) not in warm
            tally.started.append(result)

        return await send(spec, scheduled_at, started)

    began = time.perf_counter()
    watcher = asyncio.ensure_future(watch(tally)) if plan.early_stop else None
    load = asyncio.ensure_future(
        run_load(
            tracked_send,
            list(plan.specs),
            arrivals=plan.offsets,
            concurrency=plan.concurrency,
            duration=plan.duration_s,
            target_rate=None if plan.offsets is None else plan.load,
            from_scheduled=True,
            on_result=_both(tally.on_result, on_result),
        )
    )
    try:
        ended_by = await _until_done_or_decided(load, tally.decided, plan.time_limit_s)
    finally:
        if watcher is not None:
            watcher.cancel()
    now = time.perf_counter()
    if ended_by != "requests":
        verdict = judge(list(tally.measured), slo, tally.given_up(now))
    else:
        verdict = judge(_measured_in_order(load.result().results), slo)
    report = TrialReport.of(
        index, plan.load, verdict, len(tally.started), now - began, tally.tokens(), ended_by == "early_stop"
    )
    report.planned, report.ended_by = plan.measured, ended_by
    return report


def _both(
    first: Callable[[ProbeResult], None], second: Callable[[ProbeResult], None] | None
) -> Callable[[ProbeResult], None]:
    if second is None:
        return first

    def both(result: ProbeResult) -> None:
        first(result)
        second(result)

    return both


async def watch(tally: Tally, every_s: float = WATCH_INTERVAL_S) -> None:
    while True:
        await asyncio.sleep(every_s)
        tally.check_waiting(time.perf_counter())


async def _until_done_or_decided(
    load: asyncio.Future[Any], decided: asyncio.Event, limit_s: float | None = None
) -> str:
    """Wait for the load to end; cancel it once the verdict is decided or the time limit is reached.
    Says which: "requests", "early_stop" or "time_limit"."""
    waiter = asyncio.ensure_future(decided.wait())
    try:
        await asyncio.wait({load, waiter}, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        await _stop(load)  # the job was cancelled: no request may outlive it
        raise
    finally:
        waiter.cancel()
    if load.done():
        load.result()  # a bug in a send surfaces here
        return "requests"
    await _stop(load)
    return "early_stop" if decided.is_set() else "time_limit"


async def _stop(load: asyncio.Future[Any]) -> None:
    """Cancel the load and wait until every send in flight has unwound."""
    load.cancel()
    await asyncio.gather(load, return_exceptions=True)


def _measured_in_order(results: Sequence[ProbeResult]) -> list[ProbeResult]:
    return [r for r in results if r.extra.get("measured")]


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
