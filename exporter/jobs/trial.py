"""One trial of a capacity search: send a load, judge it against the SLO, stop early once decided.

A trial sends ``warmup`` requests and then ``requests`` measured ones at a fixed load, open-loop at a
rate (an arrival process) or closed-loop at a concurrency. Only the measured requests are judged; the
warm-up brings the engine's batch to its steady state first.

Every trial of a search draws the same request lengths and the same unit-rate arrival gaps (common
random numbers, scaled by ``1 / rate``): trials then differ only in load, so noise in the workload
cannot make a higher load look better than a lower one. Prompt texts still differ per trial, so a
prefix cache cannot answer a later trial from an earlier one.

The verdict is a pure function of the results (``judge`` in ``trial_verdict.py``, with the SLO a trial
is judged at, ``TrialSlo``).

With ``early_stop`` a trial ends as soon as its failures make it a *confident* failure even if every
request still to come met the target (``exporter.stats.headroom.decided_failure`` with a confidence):
the same confidence a full trial needs, so two slow requests never decide a verdict. Its remaining
sends are cancelled. A trial also ends at its time limit (``TrialPlan.time_limit_s``); either way the
unfinished requests that already waited too long for a first token count as failed and the others
are left out.

Sharded over K client processes or pods (``run_sharded_trial``), a trial is judged exactly as one
process would judge it. Its plan (the same specs and arrival offsets) is dealt over the shards of a
``ShardPool`` (``exporter.load.shards.pool``), which stream every request's start, first token and
result back as they happen, so the same ``Tally`` sees them: requests certain to fail, waits past
their give-up point, the early-stop decision; and the job's progress counts each result as it comes.
When the verdict is decided the pool tells the shards to stop; the requests they cancel come back with
the tokens received so far, which the trial's token count includes. The verdict is ``judge`` over the
merged results in plan order: a sharded trial and an in-process one of the same plan differ only in
the timings the target gave them. A shard late to start, dead, or saturated makes the merged load
something other than the plan, so such a trial does not pass: its reason is ``"shards"`` and its
figures say which shard and why (the search stops there rather than read a broken load as the
target's failure).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from exporter.jobs.trial_verdict import SHARDS_REASON, TrialCost, TrialReport, TrialSlo, Verdict, judge
from exporter.load.plan import LoadPlan
from exporter.load.runner import RunHooks, run_plan
from exporter.load.sessions import planned_tokens, session_turns
from exporter.load.shards.pool import ShardPool
from exporter.load.shards.reports import ShardRunReport
from exporter.load.shards.runs import ShardHooks
from exporter.load.workloads import Workload, specs_with_lengths
from exporter.probe.client import ProbeClient
from exporter.settings.arrival import at_rate
from exporter.settings.target import TargetSettings
from exporter.stats.batch import FloatArray
from exporter.stats.binomial import Verdict as BinomialVerdict
from exporter.stats.binomial import classify_fraction
from exporter.stats.headroom import decided_failure
from exporter.streams.request import RequestSpec
from exporter.streams.result import ProbeResult

WATCH_INTERVAL_S = 0.05  # how often waiting requests are checked against their give-up wait
StartedSend = Callable[[RequestSpec, float | None, Callable[[ProbeResult], None]], Awaitable[ProbeResult]]


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
    # (successes, requests) of earlier trials at this load when this one runs to settle its pass: it
    # stops once its misses make that pass impossible (``stop_reason``)
    settle: tuple[int, int] | None = None

    @property
    def measured(self) -> int:
        """Measured requests: every turn of the measured sessions."""
        return session_turns(self.specs[self.warmup :])

    @property
    def planned_tokens(self) -> int:
        """An upper bound on the tokens the trial can spend: every prompt (a session's turns re-send
        the conversation) and every allowed output."""
        return sum(planned_tokens(s) for s in self.specs)

    def load_plan(self) -> LoadPlan:
        """The trial as the runner's plan: TTFT from the scheduled time, the offered rate quoted."""
        rate = None if self.offsets is None else self.load
        return LoadPlan(
            list(self.specs), self.offsets, self.concurrency, rate, self.duration_s, from_scheduled=True
        )


@dataclass
class Tally:
    """Results as they finish, the started ones (for their tokens), and the early-stop verdict."""

    plan: TrialPlan
    slo: TrialSlo
    started: list[ProbeResult] = field(default_factory=list)
    measured: list[ProbeResult] = field(default_factory=list)
    failed: set[int] = field(default_factory=set)  # id() of measured requests certain to fail
    decided: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str | None = None  # why it was decided (``stop_reason``)

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

    def sent(self) -> list[ProbeResult]:
        """The measured requests started so far, finished or not."""
        return [r for r in self.started if r.extra.get("measured")]

    def tokens(self) -> int:
        """Tokens the target spent on us: every prompt sent, every output token received (cancelled
        requests included)."""
        return sum(
            (r.prompt_tokens_reported or r.prompt_tokens_intended or 0) + r.output_tokens
            for r in self.started
        )

    def alone(self, now: float) -> dict[str, Any] | None:
        """The measured requests that had nothing else of ours in flight (warm-up included) from their
        send to their end (``now`` for one unfinished), and how many of them missed the SLO: finished
        and not fluid, or given up (``give_up_bound``); an unfinished one still in time is left out.
        None when none was alone."""
        sent = [r for r in self.started if r.sent_at is not None]
        if not sent:
            return None
        spans = np.array([(r.sent_at, r.finished_at if r.finished_at is not None else now) for r in sent])
        lone = [r for r, alone in zip(sent, alone_in_flight(spans), strict=True) if alone]
        missed = [self._missed(r, now) for r in lone if r.extra.get("measured")]
        judged = [m for m in missed if m is not None]
        if not judged:
            return None
        requests, misses = len(judged), sum(judged)
        verdict = classify_fraction(requests - misses, requests, self.slo.required, self.slo.confidence)
        return {"requests": requests, "missed": misses, "verdict": str(verdict)}

    def note_alone(self, figures: dict[str, Any], now: float) -> None:
        """Put ``alone`` (above) into a verdict's ``figures`` when any measured request was alone."""
        alone = self.alone(now)
        if alone is not None:
            figures["alone"] = alone

    def _missed(self, result: ProbeResult, now: float) -> bool | None:
        if result.finished_at is not None:
            return self.slo.request_fails(result)
        return True if id(result) in self.failed or give_up_bound(result, now, self.slo) > 1.0 else None

    def _failed(self, result: ProbeResult) -> None:
        self.failed.add(id(result))
        reason = stop_reason(len(self.failed), self.plan, self.slo)
        if reason is not None:
            self.reason = reason
            self.decided.set()


def stop_reason(failures: int, plan: TrialPlan, slo: TrialSlo) -> str | None:
    """Why a trial with ``failures`` measured requests certain to fail may stop now, or None:
    ``early_stop`` (a confident failure even if every other request met the target) or
    ``cannot_settle`` (a trial run to settle its load's pass, ``plan.settle``, that can no longer
    reach it even if every other request met the target: at p99 after 200 of 200, its first miss)."""
    if not plan.early_stop:
        return None
    if decided_failure(failures, plan.measured, slo.percentile, slo.confidence):
        return "early_stop"
    if plan.settle is not None and failures and not could_pass(plan.settle, failures, plan.measured, slo):
        return "cannot_settle"
    return None


def could_pass(before: tuple[int, int], failures: int, planned: int, slo: TrialSlo) -> bool:
    """Whether the load's pooled pass fraction (``before`` plus this trial's ``planned`` requests) can
    still be a confident pass with ``failures`` of them missing the target."""
    successes, requests = before
    pooled = successes + planned - failures, requests + planned
    return classify_fraction(*pooled, slo.required, slo.confidence) is BinomialVerdict.PASS


ABOVE_ONE = math.nextafter(1.0, math.inf)  # the factor of a request certain to fail is above 1


def alone_in_flight(spans: FloatArray) -> np.ndarray:
    """Which of the ``(start, end)`` rows overlap no other row: the others started before its end,
    less those that had ended by its start, less itself, are none (a zero-length span is taken as
    the shortest positive one, so it still counts as its own)."""
    starts = spans[:, 0]
    ends = np.maximum(spans[:, 1], np.nextafter(starts, np.inf))
    begun = np.searchsorted(np.sort(starts), ends, side="left")
    over = np.searchsorted(np.sort(ends), starts, side="right")
    return np.asarray(begun - over - 1 == 0)


def give_up_bound(result: ProbeResult, now: float, slo: TrialSlo) -> float:
    """Wait for the first token (up to ``now`` if none yet) over the give-up wait: above 1, a lower bound
    on the factor the request's deadlines would need (the give-up wait scales with the deadlines)."""
    first = result.token_times[0] if result.token_times else now
    return (min(first, now) - (result.scheduled_at or now)) / slo.give_up_after(result)


@dataclass(frozen=True)
class TrialShape:
    """How a trial is drawn, whatever its load: closed loop (a concurrency) or open at a rate with
    ``arrival``'s gaps, ``warmup`` requests and then ``requests`` measured ones, the lengths and gaps
    drawn from ``seed`` (the same for every trial of a search) and the prompt texts from ``salt`` (new
    for each), the sends ended after ``duration_s`` when given."""

    concurrency: bool
    arrival: str
    warmup: int
    requests: int
    seed: int
    salt: int
    duration_s: float | None = None


def plan_trial(
    workload: Workload, load: float, shape: TrialShape, stop: threading.Event | None = None
) -> TrialPlan:
    """The specs and schedule of a trial at ``load``: the same lengths and unit-rate gaps for every
    trial of a search (``shape.seed``), unique prompt texts per trial (``shape.salt``). ``stop``:
    planning ends with a ``PlanStoppedError`` once it is set (an abandoned plan, ``off_the_loop``)."""
    rng = np.random.default_rng(shape.seed)
    warmup = shape.warmup
    if workload.sessions:  # sessions of warmup, then of measured requests; the same lengths every trial
        warm = workload.sample(warmup, rng)
        specs = warm + workload.sample(shape.requests, rng)
        warmup = len(warm)
    else:
        prompts, outputs = workload.sample_lengths(warmup + shape.requests, rng)
        specs = specs_with_lengths(
            workload, list(zip(prompts.tolist(), outputs.tolist(), strict=True)), salt=shape.salt, stop=stop
        )
    if shape.concurrency:
        return TrialPlan(load, tuple(specs), warmup, None, int(load), shape.duration_s)
    unit = at_rate(shape.arrival, 1.0).offsets(len(specs), np.random.default_rng(shape.seed + 1))
    offsets = at_unit_rate(unit, warmup) / load
    return TrialPlan(load, tuple(specs), warmup, offsets, None, shape.duration_s)


def at_unit_rate(offsets: FloatArray, warmup: int) -> FloatArray:
    """Arrival offsets of a unit-rate process, scaled so that the measured arrivals (from ``warmup``
    on) come at exactly one per unit of time, first to last, and the warm-up's (its ``warmup`` gaps,
    to the first measured arrival) at one per unit too. A trial at rate L then offers L: a sample's own
    rate differs from its process's by about 1/sqrt(n) (7 % at 200 requests; 19 % with seed 0 at 40),
    and with the same gaps in every trial of a search that error would be the answer's, every time.
    The warm-up is scaled on its own: scaled by the measured requests' factor, 20 warm-up requests
    before 10 measured would come at twice the rate. The gaps keep their shape (a Poisson
    sample becomes one conditioned on its span)."""
    measured = len(offsets) - warmup
    span = float(offsets[-1] - offsets[warmup]) if measured > 1 else 0.0
    scaled = offsets * ((measured - 1) / span) if span > 0 else offsets.copy()
    warm_span = float(offsets[warmup] - offsets[0]) if 0 < warmup < len(offsets) else 0.0
    if warm_span > 0:
        warm = offsets[0] + (offsets[: warmup + 1] - offsets[0]) * (warmup / warm_span)
        scaled = np.concatenate([warm, warm[-1] + (scaled[warmup + 1 :] - scaled[warmup])])
    return scaled


def client_send(client: Callable[[], ProbeClient]) -> StartedSend:
    """A trial's ``send`` through the client ``client()`` gives at each send (a daemon's job leases
    one for its whole life: ``JobEnvironment.lease``)."""

    async def send(
        spec: RequestSpec, at: float | None, started: Callable[[ProbeResult], None]
    ) -> ProbeResult:
        return await client().send(spec, at, on_start=started)

    return send


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
        run_plan(tracked_send, plan.load_plan(), RunHooks(on_result=_both(tally.on_result, on_result)))
    )
    try:
        ended_by = await _until_done_or_decided(load, tally.decided, plan.time_limit_s)
    finally:
        if watcher is not None:
            watcher.cancel()
    now = time.perf_counter()
    if ended_by == "early_stop":
        ended_by = tally.reason or ended_by
    closed = plan.concurrency is not None
    if ended_by != "requests":
        verdict = judge(list(tally.measured), slo, tally.given_up(now), closed_loop=closed, sent=tally.sent())
    else:
        done = load.result()
        verdict = judge(_measured_in_order(done.results), slo, closed_loop=closed)
        if done.stopped_by == "duration":
            ended_by = "duration"  # its trial duration ended the sends: fewer requests than planned
    tally.note_alone(verdict.figures, now)
    report = TrialReport.of(index, plan.load, verdict, _cost(tally, now - began), ended_by)
    report.planned = plan.measured
    return report


def _cost(tally: Tally, duration_s: float) -> TrialCost:
    return TrialCost(len(tally.started), duration_s, tally.tokens())


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


# -- a trial sharded over client processes or pods ------------------------------------------------


async def run_sharded_trial(
    index: int,
    plan: TrialPlan,
    slo: TrialSlo,
    pool: ShardPool,
    settings: TargetSettings,
    on_result: Callable[[ProbeResult], None] | None = None,
) -> TrialReport:
    """Send ``plan`` over ``pool``'s shards and judge the merged results (``on_result``: each result
    as a shard's post brings it, for progress, as ``run_trial`` gives it)."""
    tally = Tally(plan, slo)

    def started(position: int, result: ProbeResult) -> None:
        result.extra["measured"] = position >= plan.warmup
        tally.started.append(result)

    def ended(_position: int, result: ProbeResult) -> None:
        tally.on_result(result)
        if on_result is not None:
            on_result(result)

    stop = asyncio.Event()
    began = time.perf_counter()
    watcher = asyncio.ensure_future(watch(tally)) if plan.early_stop else None
    run = asyncio.ensure_future(pool.run_plan(settings, plan.load_plan(), ShardHooks(started, ended, stop)))
    try:
        stopped_by = await _until_shards_done_or_decided(run, tally, stop, plan.time_limit_s)
        report = run.result()
    finally:
        if watcher is not None:
            watcher.cancel()
    now = time.perf_counter()
    closed = plan.concurrency is not None
    if stopped_by is not None:  # judged on what came back, the requests cut short as given up
        verdict = judge(list(tally.measured), slo, tally.given_up(now), closed_loop=closed, sent=tally.sent())
    else:
        verdict = judge([r for r in report.in_order() if r.extra.get("measured")], slo, closed_loop=closed)
    # The shards' stamps come back on this process's clock (``load.shards.tasks``' origin), so which
    # requests had nothing else in flight is read across shards as in process.
    tally.note_alone(verdict.figures, now)
    ended_by = _ended_by(stopped_by, tally, report)
    trial = TrialReport.of(
        index, plan.load, with_shards(verdict, report), _cost(tally, now - began), ended_by
    )
    trial.planned = plan.measured
    return trial


def _ended_by(stopped_by: str | None, tally: Tally, report: ShardRunReport) -> str:
    """How the merged trial's sends ended, as ``run_trial`` says it of one process: the tally's stop
    (a confident failure, or a pass it could no longer settle) or the time limit, else ``duration``
    when it cut any shard's sends (the merged run then sent fewer requests than planned), else
    ``requests``."""
    if stopped_by == "early_stop":
        return tally.reason or stopped_by
    if stopped_by is not None:
        return stopped_by
    return "duration" if report.cut_by_duration else "requests"


async def _until_shards_done_or_decided(
    run: asyncio.Future[ShardRunReport], tally: Tally, stop: asyncio.Event, limit_s: float | None
) -> str | None:
    """Wait for the run; once the verdict is decided or the trial's time limit is reached, stop the
    shards and wait for their last results (their requests in flight come back cancelled). Says which
    ended it early ("early_stop", "time_limit"), or None when the run ended by itself."""
    decided: asyncio.Future[Any] = asyncio.ensure_future(tally.decided.wait())
    try:
        await asyncio.wait({run, decided}, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
        if run.done():
            return None
        stop.set()
        await asyncio.wait({run})
        return "early_stop" if decided.done() else "time_limit"
    except asyncio.CancelledError:
        run.cancel()  # the job was cancelled: the pool calls the run off, the shards hear "stop"
        await asyncio.gather(run, return_exceptions=True)
        raise
    finally:
        decided.cancel()


def with_shards(verdict: Verdict, report: ShardRunReport) -> Verdict:
    """The verdict with the shards' figures; not a pass when a shard made the load other than planned."""
    figures = {**verdict.figures, "shards": report.to_dict()}
    if report.problems:
        return Verdict(False, SHARDS_REASON, verdict.headroom, figures)
    return Verdict(verdict.passed, verdict.reason, verdict.headroom, figures)
