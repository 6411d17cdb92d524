"""A capacity search: trials at chosen loads until the highest load meeting the SLO is pinned down.

``search_capacity`` knows nothing of HTTP: it asks ``run_trial`` for each trial with a ``TrialAsk`` (a
live trial over the probe client, or one on the simulator's virtual clock in tests and the benchmark) and
``capacity_search.next_load`` where to go next; what it asks and tells its caller besides is one value
(``SearchHooks``). The result (``capacity_result.CapacityResult``) carries what was found (``state``:
found, lower bound, not met or inconclusive), the bracket ``[lower_bound, upper_bound)`` with the pass
fraction's interval at each end, the fluid token rate and goodput measured at the lower bound, the
engine model's prediction beside the bracket (``capacity_model.prediction_report``), and every trial.

Bounded: a trial starts only while the wall-clock budget (``SearchSettings.time_budget_s``: trial
durations and the waits for a drained engine, summed, so a virtual clock counts too) has time left, and
runs for at most what is left; ``stopped_by`` says which bound ended the search.

Measured on timings the client trusts: a trial near the objective (headroom within ``NEAR_HEADROOM`` of
1, where the search ends) with more requests flagged unreliable than ``bench`` allows a run
(``distrusted``) is set aside, kept in the result with why, and its load run again on a new sample
before the search steers on it; at most ``MAX_SET_ASIDE`` times a search, each counted among
``max_trials``. A second distrusted trial at a load is kept: the answer then says its timings are
unreliable. Why: the client's flags come in bursts, one stall of its machine flagging every stream in
flight (63 of a trial's 200 at 10 req/s, in 1 of 12 trials of three default searches on a quiet 2-core
VM, the other 11 with none), and a search that ended on that trial failed (exit 1) for want of a rerun.

Drained: before a trial after the first, the search waits, bounded, until the engine has finished what
the previous trial left (``wait_drained``). A request abandoned at a timeout or by an early stop can
keep running in an engine until it notices the closed connection, and a trial that starts on such an
engine measures the previous trial's leftovers (seen in CI: every trial after an overloaded one failed
in its first two requests). So a trial starts on a drained engine: when the engine's own metrics can be
read, until they show nothing running or waiting (``busy()`` returns running + waiting, None when it
cannot tell); else, our own requests having ended already (a trial cancels and awaits every send before
it returns), after a settling pause. Either way the wait is bounded (``DrainTimes.max_wait_s``) and reported.

Started where a first look says: when a rate search is given no ``start`` (``first_look``). The first
trial of a search at 1 req/s (the old default) sends its 220 requests over 224 s, and on the simulator's
8B model, whose capacity is about 10 req/s, the whole search then took 7 to 9 minutes. A short closed
loop first (``LOOK_CONCURRENCY`` requests in flight, ``LOOK_REQUESTS`` in all, the search's own lengths)
measures the rate the target serves them at (requests completed over the span from the first send to the
last end) and, judged as a trial, its headroom there. The search's first trial then goes where the
search would put the trial after one at that rate (``next_load``): past a pass by its headroom (2x to
4x), below a failure by it (to a half or a quarter). Measured on the simulator's 8B model with ShareGPT:
served 2.4-2.5 req/s, headroom about 3 (the capacity is ~10.5). The look's tokens count against the
job's budget and its seconds against the search's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.jobs.capacity_model import EngineSample, prediction_report
from exporter.jobs.capacity_result import (
    INTERRUPTED,
    LOOK_CONCURRENCY,
    LOOK_REQUESTS,
    UNRELIABLE_SHARE,
    CapacityResult,
    FirstLook,
    distrusted,
    load_unit,
    unmeasured,
)
from exporter.jobs.capacity_search import (
    Observation,
    SearchSettings,
    State,
    bracket,
    converged,
    hopeless,
    next_load,
    outcome,
    pass_interval,
    pool,
    settling,
    verdict,
)
from exporter.jobs.trial import StartedSend, TrialShape, plan_trial, run_trial
from exporter.jobs.trial_verdict import TrialReport, TrialSlo
from exporter.load.workloads import Workload
from exporter.settings.job_params import MIN_TRIAL_S

FIRST_TRIAL = 1  # the index of a search's first trial (a trial's index counts from it, in the order run)


@dataclass(frozen=True)
class TrialAsk:
    """What the search asks of its next trial."""

    index: int  # from ``FIRST_TRIAL``, in the order run
    load: float
    may_stop: bool  # early, once its verdict is certain
    time_left_s: float | None = None  # the most it may last (None: no bound of the search's)
    # The (successes, requests) seen at the load when the trial runs to settle its pass
    # (``TrialPlan.settle``); None for a first trial at the load.
    settle: tuple[int, int] | None = None


RunTrial = Callable[[TrialAsk], Awaitable[TrialReport]]
OnTrial = Callable[[TrialReport], None]
Afford = Callable[[float], str | None]  # a reason not to run a trial at this load, or None
Drain = Callable[[], Awaitable["Drained"]]  # wait until the engine is idle
OnInterrupt = Callable[[CapacityResult], None]  # what a stopped search measured (``interrupted``)
Busy = Callable[[], Awaitable[float | None]]  # requests running + waiting in the engine (None: unknown)
MAX_SET_ASIDE = 2  # distrusted trials a search runs again (each one a trial's time and tokens more)
# Only a trial this near the objective is set aside: where the search ends (a 5% tolerance; on the
# simulator's engine headroom 1.4 lies at 0.84x the capacity); farther, it steers on its headroom alone,
# which a few ms of merged reads hardly move, and a rerun costs a whole trial (46 s at 0.5x, seen).
NEAR_HEADROOM = 1.25


@dataclass(frozen=True)
class DrainTimes:
    """How a drain waits: the engine's counts read every ``poll_s``; without them, a pause of
    ``settle_s`` for the engine to notice closed connections; never longer than ``max_wait_s`` (an
    engine busy with others' load never drains)."""

    max_wait_s: float = 120.0
    settle_s: float = 2.0
    poll_s: float = 1.0


DRAIN_TIMES = DrainTimes()
# The first look (``first_look``; its size, ``capacity_result.LOOK_REQUESTS``, is said with what it saw)
LOOK_LIMIT_S = 60.0  # a slow target's look ends here, judged on what finished
LOOK_SALT = 999_000_000  # prompt texts apart from every trial's (``salt + index * 1_000_000``)


@dataclass(frozen=True)
class SearchHooks:
    """What a search asks and tells its caller besides its trials (each None: not asked, not told)."""

    on_trial: OnTrial | None = None  # each trial, as it ends
    afford: Afford | None = None  # before each trial: a reason not to run it at this load
    drain: Drain | None = None  # before each trial after the first: wait for an idle engine
    on_interrupt: OnInterrupt | None = None  # stopped from outside: what its trials showed


@dataclass
class _Record:
    """What a search has run so far: every trial, the observations it steers by (those not set aside),
    how many it set aside, and the seconds of its time budget spent (trials and drain waits)."""

    trials: list[TrialReport] = field(default_factory=list)
    history: list[Observation] = field(default_factory=list)
    set_aside: int = 0
    spent_s: float = 0.0

    def time_left(self, settings: SearchSettings) -> float | None:
        budget = settings.time_budget_s
        return None if budget is None else budget - self.spent_s


async def search_capacity(
    settings: SearchSettings, run_trial: RunTrial, hooks: SearchHooks = SearchHooks()
) -> CapacityResult:
    """Run trials until ``next_load`` says the search is over, ``hooks.afford`` refuses the next one or
    the time budget runs out. Stopped from outside (cancelled, or Ctrl-C and SIGTERM in a command), it
    tells ``hooks.on_interrupt`` what its finished trials showed (``interrupted``) and stops as told: six
    minutes of trials were once lost to a Ctrl-C."""
    record = _Record()
    try:
        return await _search(settings, run_trial, hooks, record)
    except (asyncio.CancelledError, KeyboardInterrupt):
        if hooks.on_interrupt is not None:
            hooks.on_interrupt(interrupted(settings, record))
        raise


def interrupted(settings: SearchSettings, record: _Record) -> CapacityResult:
    """What a search stopped from outside measured: its trials, the bracket so far, state
    ``interrupted`` (no answer: a capacity is stated only by a search that ended)."""
    result = _result(settings, record, INTERRUPTED)
    result.state, result.converged = State.INTERRUPTED, False
    return result


async def _search(
    settings: SearchSettings, run_trial: RunTrial, hooks: SearchHooks, record: _Record
) -> CapacityResult:
    trials, history = record.trials, record.history
    stopped_by = ""
    while (load := next_load(_trials_left(settings, record.set_aside), history)) is not None:
        refusal = hooks.afford(load) if hooks.afford is not None else None
        drained = None
        if refusal is None and hooks.drain is not None and trials:
            drained = await hooks.drain()
            record.spent_s += drained.waited_s
        left = record.time_left(settings)
        if refusal is None and left is not None and left < MIN_TRIAL_S:
            refusal = "time_budget"
        if refusal is not None:
            stopped_by = refusal
            break
        # The first failure runs in full: its headroom anchors the interpolation, and a trial stopped
        # early shows only the requests quick enough to finish, which hides how far past capacity it
        # was (measured: headroom 0.92 when stopped, 0.28 in full, at 1.5x the capacity). Near the
        # capacity, where the later failures land, that bias is small and stopping saves tokens.
        may_stop = settings.early_stop and any(
            not seen.passed for seen in history
        )  # set aside: anchors nothing
        settle = settling(settings, history, load)
        ask = TrialAsk(FIRST_TRIAL + len(trials), load, may_stop, left, settle)
        trial = await run_trial(ask)
        if drained is not None:
            trial.drain_wait_s, trial.drained_by = drained.waited_s, drained.how
        record.spent_s += trial.duration_s
        trials.append(trial)
        nothing = unmeasured(trial, settings.load_kind)
        if nothing is not None:
            # Nothing to learn about the target from it, and the next trial would fare no better:
            # the load was not the planned one (a shard late, dead or saturated), or it measured
            # nothing (its duration ended in the warm-up). Counted as a failure it would steer the
            # search down to the floor and report "not met" for a target never measured.
            stopped_by = nothing
            _tell(hooks, trial)
            break
        if record.set_aside < MAX_SET_ASIDE and len(trials) < settings.max_trials:
            trial.set_aside = _set_aside_reason(trial, trials[:-1], settings.load_kind)
        if trial.set_aside is not None:
            record.set_aside += 1
            _tell(hooks, trial)
            continue
        history.append(observation(trial))
        _tell(hooks, trial)
    return _result(settings, record, stopped_by)


def _tell(hooks: SearchHooks, trial: TrialReport) -> None:
    if hooks.on_trial is not None:
        hooks.on_trial(trial)


def observation(trial: TrialReport) -> Observation:
    counts = trial.counts()
    return Observation(
        trial.load, trial.passed, trial.headroom, counts[0] if counts else None,
        counts[1] if counts else None, trial.objectives_met(), idle_misses=trial.fails_alone(),
        engine=EngineSample.of(trial.figures),
    )  # fmt: skip


def _trials_left(settings: SearchSettings, set_aside: int) -> SearchSettings:
    """``settings`` with the trials set aside taken off ``max_trials``: they ran, and count."""
    return (
        dataclasses.replace(settings, max_trials=settings.max_trials - set_aside) if set_aside else settings
    )


def _set_aside_reason(trial: TrialReport, earlier: list[TrialReport], load_kind: str) -> str | None:
    """Why ``trial`` is run again before the search steers on it (its timings distrusted, its headroom
    within ``NEAR_HEADROOM`` of 1, and no earlier trial at its load set aside: a second is believed),
    or None."""
    counts = distrusted(trial)
    near = 1.0 / NEAR_HEADROOM <= trial.headroom <= NEAR_HEADROOM  # False for NaN
    if counts is None or not near or any(t.load == trial.load and t.set_aside is not None for t in earlier):
        return None
    return (
        f"{counts[0]} of {counts[1]} requests timed unreliably by the client (at most "
        f"{UNRELIABLE_SHARE:.0%} may be): run again at {trial.load:g} {load_unit(load_kind)} on a new sample"
    )


def _result(settings: SearchSettings, record: _Record, stopped_by: str) -> CapacityResult:
    history = record.history
    found = bracket(pool(settings, history))
    ends = {"lower_bound": found.low, "upper_bound": found.high}
    intervals: dict[str, Any] = {}
    for name, end in ends.items():
        bounds = pass_interval(settings, end) if end is not None else None
        if end is not None and bounds is not None:
            intervals[name] = {
                "successes": end.successes, "requests": end.requests, "low": bounds.low,
                "high": bounds.high, "verdict": str(verdict(settings, end)), "trials": end.parts,
            }  # fmt: skip
    return CapacityResult(
        load_kind=settings.load_kind,
        state=outcome(settings, history) if history else None,
        lower_bound=found.low.load if found.low is not None else None,
        upper_bound=found.high.load if found.high is not None else None,
        converged=converged(settings, found),
        stopped_by=stopped_by or _why_stopped(settings, history),
        trials=record.trials,
        intervals=intervals,
        prediction=prediction_report(settings, history, found.low.load if found.low is not None else None),
    )


def _idle_stop(settings: SearchSettings, failed: Observation) -> str:
    missed, requests = failed.idle_misses or (0, 0)
    unit = load_unit(settings.load_kind)
    return (
        f"floor: fails with the engine idle: at {failed.load:g} {unit}, {missed} of {requests} requests "
        "that had it to themselves (nothing else of ours in flight) missed the SLO, so no lower load can help"
    )


def _why_stopped(settings: SearchSettings, history: list[Observation]) -> str:
    found = bracket(pool(settings, history))
    if converged(settings, found):
        return "converged"
    if found.low is None and found.high is not None and hopeless(settings, found.high):
        # Not even the floor passed, or the requests alone in flight failed: the SLO is not met at any
        # load we offer (the same stop kind, so the daemon and its alert read it as one).
        return "floor" if found.high.idle_misses is None else _idle_stop(settings, found.high)
    if found.high is None and found.low is not None and found.low.load >= settings.max_load:
        return "max_load"
    return "max_trials"


# -- waiting for a drained engine -------------------------------------------------------------------


@dataclass(frozen=True)
class Drained:
    """How long the wait took and how it ended: "engine_idle", "settled" (no engine metrics: the pause)
    or "max_wait" (the engine still showed requests when the bound was reached)."""

    waited_s: float
    how: str


async def wait_drained(
    busy: Busy | None,
    times: DrainTimes = DRAIN_TIMES,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Drained:
    """Wait until ``busy()`` reads 0 (polling every ``times.poll_s``), or for ``times.settle_s`` when
    it cannot tell (None), at most ``times.max_wait_s`` in all."""
    max_wait_s, settle_s, poll_s = times.max_wait_s, times.settle_s, times.poll_s
    began = clock()
    while True:
        load = await busy() if busy is not None else None
        waited = clock() - began
        if load is None:
            pause = max(min(settle_s, max_wait_s - waited), 0.0)
            await sleep(pause)
            return Drained(clock() - began, "settled")
        if load <= 0:
            return Drained(waited, "engine_idle")
        if waited + poll_s > max_wait_s:
            return Drained(waited, "max_wait")
        await sleep(poll_s)


# -- the first look --------------------------------------------------------------------------------


def look_rate(report: TrialReport) -> float | None:
    """The rate a look's closed loop was served at, or None with fewer than half its requests done
    (a rate over a few quick ones would overstate it)."""
    completed = report.figures.get("completed")
    rate = report.figures.get("offered_rate_per_s")
    if not isinstance(completed, int) or completed < LOOK_REQUESTS // 2:
        return None
    return float(rate) if isinstance(rate, float) and math.isfinite(rate) and rate > 0 else None


async def first_look(
    workload: Workload, slo: TrialSlo, send: StartedSend, *, seed: int, salt: int
) -> FirstLook:
    """Send the look (``send`` as a trial's) and say what rate it was served at."""
    shape = TrialShape(
        concurrency=True,
        arrival="poisson",
        warmup=0,
        requests=LOOK_REQUESTS,
        seed=seed,
        salt=salt + LOOK_SALT,
    )
    drawn = plan_trial(workload, float(LOOK_CONCURRENCY), shape)
    plan = dataclasses.replace(drawn, early_stop=False, time_limit_s=LOOK_LIMIT_S)
    report = await run_trial(0, plan, slo, send)
    completed = report.figures.get("completed")
    done = completed if isinstance(completed, int) else 0
    return FirstLook(
        look_rate(report), report.passed, report.headroom, report.duration_s, report.tokens, done
    )


def look_start(look: FirstLook, settings: SearchSettings) -> float:
    """The search's start: where it would go after a trial at the look's rate (within ``[floor,
    max_load]``) that fared as the look did, to three significant digits; ``settings.start`` when the
    look could not say."""
    if look.rate is None:
        return settings.start
    seen = min(max(look.rate, settings.min_load), settings.max_load)
    # The look is no trial of the search's: it takes none of ``max_trials`` (one trial would end it).
    unbounded = dataclasses.replace(settings, max_trials=max(settings.max_trials, 2))
    placed = next_load(unbounded, [Observation(seen, look.passed, look.headroom)])
    if placed is None:  # at the ceiling after a pass, at the floor after a failure
        placed = seen
    rounded = float(f"{placed:.3g}")
    return min(max(rounded, settings.min_load), settings.max_load)
