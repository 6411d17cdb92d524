"""What a capacity search found, as values: the result (``CapacityResult``) with the bracket, the state,
every trial, the figures and costs at capacity and what ended the search (``STOP_KINDS``), and the
first look that placed its start (``FirstLook``). Read by the ``capacity`` command, the daemon's job,
its metrics and the jobs API; made by the search (``capacity_loop.search_capacity``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from exporter.jobs.capacity_search import State
from exporter.jobs.trial_verdict import ERRORS_REASON, NO_DATA_REASON, SHARDS_REASON, TrialReport
from exporter.load.health import HealthThresholds
from exporter.load.target_facts import ContextFit

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
UNRELIABLE_SHARE = HealthThresholds().max_unreliable_share  # of a trial's requests, as of a bench run's
# The first look's size (sent by ``capacity_loop.first_look``, said by ``FirstLook.describe``)
LOOK_CONCURRENCY = 16
LOOK_REQUESTS = 32  # each slot sends two, so the loop is closed, not one burst


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
    # information beside the answer: by default no trial is placed by it, and it is never the answer
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
        (``unmeasured``) has no figures to price."""
        judged = [t for t in self.judged if unmeasured(t, self.load_kind) is None]
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


def distrusted(trial: TrialReport) -> tuple[int, int] | None:
    """(flagged, requests) when the client flagged more of the trial's requests unreliable than
    ``bench``'s ``unreliable`` check allows a run's, else None."""
    total, flagged = trial.figures.get("requests"), trial.figures.get("unreliable")
    if not isinstance(total, int) or not isinstance(flagged, int) or total <= 0:
        return None
    return (flagged, total) if flagged > UNRELIABLE_SHARE * total else None


def load_unit(load_kind: str) -> str:
    """How a load of this kind is read: a rate in requests per second, or requests in flight."""
    return "req/s" if load_kind == "rate" else "concurrent"


def unmeasured(trial: TrialReport, load_kind: str) -> str | None:
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


@dataclass(frozen=True)
class FirstLook:
    """What the look saw: the rate it was served at (None: too few requests finished to say), whether
    it met the SLO there and by how much (headroom), how long it took, the tokens it spent."""

    rate: float | None
    passed: bool
    headroom: float
    duration_s: float
    tokens: int
    completed: int

    def describe(self, start: float, unit: str) -> str:
        verdict = "met the SLO" if self.passed else "missed the SLO"
        served = (
            f"served {self.rate:.3g} {unit}, {verdict} (headroom {self.headroom:.2g})"
            if self.rate is not None
            else "too few answers"
        )
        return (
            f"first look: {LOOK_REQUESTS} requests, {LOOK_CONCURRENCY} in flight, {served} in "
            f"{self.duration_s:.1f} s: the search starts at {start:.4g} {unit}"
        )
