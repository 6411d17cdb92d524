"""A capacity search: trials at chosen loads until the highest load meeting the SLO is pinned down.

``search_capacity`` knows nothing of HTTP: it asks ``run_trial(index, load)`` for each trial (a live
trial over the probe client, or one on the simulator's virtual clock in tests and the benchmark) and
``capacity_search.next_load`` where to go next. The result carries what was found (``state``: found,
lower bound, not met or inconclusive), the bracket ``[lower_bound, upper_bound)`` with the pass
fraction's interval at each end, the fluid token rate and goodput measured at the lower bound, the
engine model's prediction beside the bracket (``capacity_model.prediction_report``), and every trial.

Bounded: a trial starts only while the wall-clock budget (``time_budget_s``: trial durations and the
waits for a drained engine, summed, so a virtual clock counts too) has time left, and runs for at most
what is left; ``stopped_by`` says which bound ended the search.

Measured on timings the client trusts: a trial near the objective (headroom within ``NEAR_HEADROOM``
of 1, where the search ends) with more requests flagged unreliable than ``bench`` allows a run
(``distrusted``) is set aside, kept in the result with why, and its load run again on a new sample
before the search steers on it; at most ``MAX_SET_ASIDE`` times a search, each counted
among ``max_trials``. A second distrusted trial at a load is kept: the answer then says its timings are
unreliable. Why: the client's flags come in bursts, one stall of its machine flagging every stream in
flight (63 of a trial's 200 at 10 req/s, in 1 of 12 trials of three default searches on a quiet 2-core
VM, the other 11 with none), and a search that ended on that trial failed (exit 1) for want of a rerun.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.jobs.capacity_model import EngineSample, prediction_report
from exporter.jobs.capacity_search import next_load, settling
from exporter.jobs.drain import Drained
from exporter.jobs.first_look import FirstLook
from exporter.jobs.search_state import (
    Observation,
    SearchSettings,
    State,
    bracket,
    converged,
    hopeless,
    outcome,
    pass_interval,
    pool,
    verdict,
)
from exporter.jobs.trial import TrialReport
from exporter.jobs.trial_verdict import ERRORS_REASON, NO_DATA_REASON, SHARDS_REASON
from exporter.load.health import HealthThresholds
from exporter.load.target_facts import ContextFit
from exporter.settings.job_params import MIN_TRIAL_S

# (index, load, may stop early, seconds the trial may last at most: None for no bound of the search's,
# the (successes, requests) seen at the load when the trial runs to settle its pass: ``TrialPlan.settle``)
RunTrial = Callable[[int, float, bool, float | None, tuple[int, int] | None], Awaitable[TrialReport]]
OnTrial = Callable[[TrialReport], None]
OnStart = Callable[[int, float], None]  # a trial (index, load) is about to start
Afford = Callable[[float], str | None]  # a reason not to run a trial at this load, or None
Drain = Callable[[], Awaitable[Drained]]  # wait until the engine is idle
OnInterrupt = Callable[["CapacityResult"], None]  # what a stopped search measured (``interrupted``)
# What can end a search (``stopped_by`` without its details, ``stop_kind``): converged within the
# tolerance, failing at the floor, passing at the load ceiling, out of trials, out of time, out of
# tokens (jobs.limits.max_tokens), a shard's problem, or a trial that measured no request.
STOP_KINDS = (
    "converged",
    "floor",
    "max_load",
    "max_trials",
    "time_budget",
    "max_tokens",
    "shards",
    "no_data",
    "interrupted",
)
INTERRUPTED = "interrupted"  # ``stopped_by`` of a search stopped from outside (``State.INTERRUPTED``)
_UNMEASURED_STOPS = ("shards", "no_data")  # the search ended on a trial that said nothing of the target
MAX_SET_ASIDE = 2  # distrusted trials a search runs again (each one a trial's time and tokens more)
UNRELIABLE_SHARE = HealthThresholds().max_unreliable_share  # of a trial's requests, as of a bench run's
# Only a trial this near the objective is set aside: where the search ends (a 5% tolerance; on the
# simulator's engine headroom 1.4 lies at 0.84x the capacity); farther, it steers on its headroom alone,
# which a few ms of merged reads hardly move, and a rerun costs a whole trial (46 s at 0.5x, seen).
NEAR_HEADROOM = 1.25


def stop_kind(stopped_by: str) -> str | None:
    """Which of ``STOP_KINDS`` ended a search, from its ``stopped_by`` (whose details, after a colon,
    name trials, shards or budgets); None for a text of none of them (a result stored by an older
    version may hold one)."""
    kind = stopped_by.split(":", 1)[0].strip().removeprefix("jobs.limits.")
    return kind if kind in STOP_KINDS else None


@dataclass
class CapacityResult:
    """The outcome of a search. ``lower_bound``: the highest passing load below the lowest failing one
    (``upper_bound``), None when no load passed. ``capacity`` is the lower bound when the state is
    ``found`` (a measurement), else None; ``bracketed`` is False when no load failed. ``state`` is None
    when no trial could be judged (``stopped_by`` says why): there is no finding to state."""

    load_kind: str
    state: State | None
    lower_bound: float | None
    upper_bound: float | None
    converged: bool
    # "converged", "max_load", "floor", "max_trials", "time_budget", a budget reason, "shards: ...",
    # "no_data: ..."
    stopped_by: str
    trials: list[TrialReport] = field(default_factory=list)
    slo: dict[str, Any] = field(default_factory=dict)
    intervals: dict[str, Any] = field(default_factory=dict)  # pass-fraction interval of each end
    gpus: float | None = None  # accelerators behind the target (targets[].gpus), for the cost figures
    gpu_hour_price: float | None = None
    context: ContextFit | None = None  # how the workload met the served context (None: not asked)
    first_look: FirstLook | None = None  # where the search started, when no start was given
    # The engine model's prediction beside the measured bracket (``capacity_model.prediction_report``):
    # information that placed the trials, never the answer
    prediction: dict[str, Any] | None = None

    @property
    def capacity(self) -> float | None:
        return self.lower_bound if self.state is State.FOUND else None

    @property
    def measured_capacity(self) -> float | None:
        """The capacity when it is a measurement: found, on timings the client trusted (what the daemon
        exports as ``fluidity_capacity_requests_per_second``); else None."""
        return self.capacity if self.unreliable_timings() is None else None

    @property
    def bracketed(self) -> bool:
        return self.upper_bound is not None

    @property
    def judged(self) -> list[TrialReport]:
        """The trials the search went by: all but those set aside for distrusted timings."""
        return [t for t in self.trials if t.set_aside is None]

    @property
    def at_capacity(self) -> TrialReport | None:
        """The (last) trial that passed at the lower bound."""
        passed = [t for t in self.judged if t.passed and t.load == self.lower_bound]
        return passed[-1] if passed else None

    @property
    def tokens(self) -> int:
        return sum(t.tokens for t in self.trials)

    def target_failure(self) -> str | None:
        """Why the target itself failed (every trial sunk by failed requests alone: it is down or
        erroring, not slow), or None. Such a search measured no capacity, not a capacity of 0."""
        if not self.trials or any(t.reason != ERRORS_REASON for t in self.trials):
            return None
        outcomes = self.trials[-1].figures.get("outcomes") or {}
        seen = ", ".join(f"{name} {count}" for name, count in sorted(outcomes.items()))
        return (
            f"the target failed: in every trial ({len(self.trials)}) more requests failed than the SLO "
            f"allows (the last one's outcomes: {seen or 'none recorded'})"
        )

    def unreliable_timings(self) -> str | None:
        """Why the answer rests on timings the probe's client flagged unreliable (a trial at either end
        of the answer with more of them than ``bench``'s ``unreliable`` check allows a run's requests:
        it read chunks of a stream together while its loop was late, or was saturated), or None. The
        trials count requests only (``bench`` also bounds the gaps between tokens the flags concern:
        ``doubtful_gaps``). ``bench`` fails such a run and so does the
        ``capacity`` command (exit 1); the daemon exports it (``fluidity_capacity_unreliable_timings``)
        and its capacity-regression alert does not count such a search."""
        ends = {self.lower_bound, self.upper_bound} - {None}
        shaky = [
            f"trial {t.index} at {t.load:g} {load_unit(self.load_kind)}: {counts[0]} of {counts[1]} requests"
            for t in self.judged
            if t.load in ends and (counts := distrusted(t)) is not None
        ]
        return _distrusted_answer(shaky) if shaky else None

    def unmeasured_stop(self) -> str | None:
        """``stopped_by`` when the search ended on a trial that measured nothing of the target (a
        shard started late, died or was saturated; a trial's duration ended in its warm-up), else None.
        What earlier trials showed stands, but the answer is cut short for a reason of ours, not the
        target's: the ``capacity`` command exits 1 and the daemon's job fails, with this message."""
        return self.stopped_by if stop_kind(self.stopped_by) in _UNMEASURED_STOPS else None

    @property
    def duration_s(self) -> float:
        return sum(t.duration_s for t in self.trials)

    def figure(self, name: str) -> float | None:
        """A figure of the trial at capacity: ``fluid_token_rate``, ``goodput_ratio``, ``goodput_rate``."""
        trial = self.at_capacity
        return trial_figure(trial, name) if trial is not None else None

    @property
    def highest(self) -> TrialReport | None:
        """The (last) judged trial at the highest load tried: one that measured nothing of the target
        (``_unmeasured``) has no figures to price."""
        judged = [t for t in self.judged if _unmeasured(t, self.load_kind) is None]
        top = max((t.load for t in judged), default=None)
        return next((t for t in reversed(judged) if t.load == top), None)

    def costs(self) -> dict[str, dict[str, float | None]]:
        """At the lower bound ("capacity") and at the highest load tried: the fluid goodput (output
        tokens/s of requests that met the SLO), per GPU-second with ``gpus``, and with a price the cost
        of a million tokens served within the SLO: ``price / 3600 / tokens per GPU-second * 1e6``."""
        points = {"capacity": self.at_capacity, "highest_load": self.highest}
        return {
            at: cost_figures(trial, self.gpus, self.gpu_hour_price) for at, trial in points.items() if trial
        }

    def to_dict(self) -> dict[str, Any]:
        unit = "requests_per_second" if self.load_kind == "rate" else "concurrency"
        return {
            "load_kind": self.load_kind,
            "unit": unit,
            "state": str(self.state) if self.state is not None else None,
            "capacity": self.capacity,
            "lower_bound": self.lower_bound,
            "upper_bound": self.upper_bound,
            "pass_intervals": self.intervals,
            "bracketed": self.bracketed,
            "converged": self.converged,
            "stopped_by": self.stopped_by,
            "unreliable_timings": self.unreliable_timings(),
            "fluid_token_rate_at_capacity": self.figure("fluid_token_rate"),
            "goodput_ratio_at_capacity": self.figure("goodput_ratio"),
            "goodput_rate_at_capacity": self.figure("goodput_rate"),
            "costs": self.costs(),
            "gpus": self.gpus,
            "gpu_hour_price": self.gpu_hour_price,
            "context": self.context.to_dict() if self.context is not None else None,
            "first_look": dataclasses.asdict(self.first_look) if self.first_look is not None else None,
            "prediction": self.prediction,
            "trial_count": len(self.trials),
            "tokens": self.tokens,
            "duration_s": self.duration_s,
            "slo": self.slo,
            "trials": [t.to_dict() for t in self.trials],
        }


def trial_figure(trial: TrialReport, name: str) -> float | None:
    """``fluid_token_rate``, ``goodput_ratio`` or ``goodput_rate`` of ``trial`` (None: not finite)."""
    good = trial.figures.get("goodput") or {}
    value = {
        "fluid_token_rate": trial.figures.get("fluid_token_rate"),
        "goodput_ratio": good.get("ratio"),
        "goodput_rate": good.get("rate_per_s"),
    }[name]
    return float(value) if value is not None and math.isfinite(value) else None


def _distrusted_answer(shaky: list[str]) -> str:
    """``unreliable_timings`` naming the ``shaky`` trials at the answer's ends, and what to do."""
    return (
        f"the answer rests on timings the probe's client flagged unreliable ({'; '.join(shaky)}; at "
        f"most {UNRELIABLE_SHARE:.0%} may be): it read chunks of a stream together, either late itself (give it "
        "more CPU: --workers or jobs.workers, or a quieter machine) or as the server sent them, in "
        "bursts (a buffering gateway: probe the engine directly to tell)"
    )


def cost_figures(trial: TrialReport, gpus: float | None, price: float | None) -> dict[str, float | None]:
    """Fluid goodput of ``trial``, per GPU-second, and the cost of a million fluid tokens."""
    raw = trial.figures.get("fluid_goodput_tokens_per_s")
    goodput = float(raw) if isinstance(raw, int | float) and math.isfinite(raw) else None
    per_gpu = goodput / gpus if goodput is not None and gpus else None
    cost = price / 3600.0 / per_gpu * 1e6 if price is not None and per_gpu else None
    return {
        "load": trial.load,
        "fluid_goodput_tokens_per_s": goodput,
        "fluid_tokens_per_gpu_second": per_gpu,
        "cost_per_million_fluid_tokens": cost,
    }


def observation(trial: TrialReport) -> Observation:
    counts = trial.counts()
    return Observation(
        trial.load, trial.passed, trial.headroom, counts[0] if counts else None,
        counts[1] if counts else None, trial.objectives_met(), idle_misses=trial.fails_alone(),
        engine=EngineSample.of(trial.figures),
    )  # fmt: skip


def distrusted(trial: TrialReport) -> tuple[int, int] | None:
    """(flagged, requests) when the client flagged more of the trial's requests unreliable than
    ``bench``'s ``unreliable`` check allows a run's, else None."""
    total, flagged = trial.figures.get("requests"), trial.figures.get("unreliable")
    if not isinstance(total, int) or not isinstance(flagged, int) or total <= 0:
        return None
    return (flagged, total) if flagged > UNRELIABLE_SHARE * total else None


@dataclass
class _Budget:
    """Seconds of the search's wall-clock budget spent (trials and drain waits)."""

    limit: float | None
    spent: float = 0.0

    def left(self) -> float | None:
        return None if self.limit is None else self.limit - self.spent


async def search_capacity(
    settings: SearchSettings,
    run_trial: RunTrial,
    *,
    load_kind: str = "rate",
    slo: dict[str, Any] | None = None,
    on_trial: OnTrial | None = None,
    afford: Afford | None = None,
    early_stop: bool = True,
    time_budget_s: float | None = None,
    drain: Drain | None = None,
    on_start: OnStart | None = None,
    on_interrupt: OnInterrupt | None = None,
) -> CapacityResult:
    """Run trials until ``next_load`` says the search is over, ``afford`` refuses the next one or the
    time budget runs out. Stopped from outside (cancelled, or Ctrl-C and SIGTERM in a command), it
    tells ``on_interrupt`` what its finished trials showed (``interrupted``) and stops as told: six
    minutes of trials were once lost to a Ctrl-C."""
    trials: list[TrialReport] = []
    history: list[Observation] = []
    try:
        return await _search(
            settings, run_trial, trials, history, load_kind=load_kind, slo=slo, on_trial=on_trial,
            afford=afford, early_stop=early_stop, time_budget_s=time_budget_s, drain=drain,
            on_start=on_start,
        )  # fmt: skip
    except (asyncio.CancelledError, KeyboardInterrupt):
        if on_interrupt is not None:
            on_interrupt(interrupted(settings, history, trials, load_kind, slo or {}))
        raise


def interrupted(
    settings: SearchSettings,
    history: list[Observation],
    trials: list[TrialReport],
    load_kind: str,
    slo: dict[str, Any],
) -> CapacityResult:
    """What a search stopped from outside measured: its trials, the bracket so far, state
    ``interrupted`` (no answer: a capacity is stated only by a search that ended)."""
    result = _result(settings, history, trials, load_kind, INTERRUPTED, slo)
    result.state, result.converged = State.INTERRUPTED, False
    return result


async def _search(
    settings: SearchSettings,
    run_trial: RunTrial,
    trials: list[TrialReport],
    history: list[Observation],
    *,
    load_kind: str,
    slo: dict[str, Any] | None,
    on_trial: OnTrial | None,
    afford: Afford | None,
    early_stop: bool,
    time_budget_s: float | None,
    drain: Drain | None,
    on_start: OnStart | None,
) -> CapacityResult:
    clock = _Budget(time_budget_s)
    stopped_by = ""
    set_aside = 0
    while (load := next_load(_trials_left(settings, set_aside), history)) is not None:
        refusal = afford(load) if afford is not None else None
        drained = None
        if refusal is None and drain is not None and trials:
            drained = await drain()
            clock.spent += drained.waited_s
        left = clock.left()
        if refusal is None and left is not None and left < MIN_TRIAL_S:
            refusal = "time_budget"
        if refusal is not None:
            stopped_by = refusal
            break
        # The first failure runs in full: its headroom anchors the interpolation, and a trial stopped
        # early shows only the requests quick enough to finish, which hides how far past capacity it
        # was (measured: headroom 0.92 when stopped, 0.28 in full, at 1.5x the capacity). Near the
        # capacity, where the later failures land, that bias is small and stopping saves tokens.
        may_stop = early_stop and any(not seen.passed for seen in history)  # set aside: anchors nothing
        if on_start is not None:
            on_start(len(trials) + 1, load)
        settle = settling(settings, history, load)
        trial = await run_trial(len(trials) + 1, load, may_stop, clock.left(), settle)
        if drained is not None:
            trial.drain_wait_s, trial.drained_by = drained.waited_s, drained.how
        clock.spent += trial.duration_s
        trials.append(trial)
        unmeasured = _unmeasured(trial, load_kind)
        if unmeasured is not None:
            # Nothing to learn about the target from it, and the next trial would fare no better:
            # the load was not the planned one (a shard late, dead or saturated), or it measured
            # nothing (its duration ended in the warm-up). Counted as a failure it would steer the
            # search down to the floor and report "not met" for a target never measured.
            stopped_by = unmeasured
            if on_trial is not None:
                on_trial(trial)
            break
        if set_aside < MAX_SET_ASIDE and len(trials) < settings.max_trials:
            trial.set_aside = _set_aside_reason(trial, trials[:-1], load_kind)
        if trial.set_aside is not None:
            set_aside += 1
            if on_trial is not None:
                on_trial(trial)
            continue
        history.append(observation(trial))
        if on_trial is not None:
            on_trial(trial)
    return _result(settings, history, trials, load_kind, stopped_by, slo or {})


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


def load_unit(load_kind: str) -> str:
    """How a load of this kind is read: a rate in requests per second, or requests in flight."""
    return "req/s" if load_kind == "rate" else "concurrent"


def _unmeasured(trial: TrialReport, load_kind: str) -> str | None:
    """Why ``trial`` says nothing about the target (``stopped_by``), or None when it does."""
    if trial.reason == SHARDS_REASON:
        return "shards: " + "; ".join(trial.figures["shards"]["problems"])
    if trial.reason == NO_DATA_REASON:
        return (
            f"no_data: trial {trial.index} at {trial.load:g} {load_unit(load_kind)} measured no request "
            f"({trial.requests_sent} sent, ended by {trial.ended_by.replace('_', ' ')}, after "
            f"{trial.duration_s:.1f} s): raise the trial duration or lower the warm-up"
        )
    return None


def _result(
    settings: SearchSettings,
    history: list[Observation],
    trials: list[TrialReport],
    load_kind: str,
    stopped_by: str,
    slo: dict[str, Any],
) -> CapacityResult:
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
        load_kind=load_kind,
        state=outcome(settings, history) if history else None,
        lower_bound=found.low.load if found.low is not None else None,
        upper_bound=found.high.load if found.high is not None else None,
        converged=converged(settings, found),
        stopped_by=stopped_by or _why_stopped(settings, history),
        trials=trials,
        slo=slo,
        intervals=intervals,
        prediction=prediction_report(settings, history, found.low.load if found.low is not None else None),
    )


def _idle_stop(settings: SearchSettings, failed: Observation) -> str:
    missed, requests = failed.idle_misses or (0, 0)
    unit = load_unit("concurrency" if settings.integer else "rate")
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
