"""A capacity search: trials at chosen loads until the highest load meeting the SLO is pinned down.

``search_capacity`` knows nothing of HTTP: it asks ``run_trial(index, load)`` for each trial (a live
trial over the probe client, or one on the simulator's virtual clock in tests and the benchmark) and
``capacity_search.next_load`` where to go next. The result carries the capacity, the fluid token rate
and goodput measured at it, and every trial.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from exporter.jobs.capacity_search import Observation, SearchSettings, bracket, capacity, converged, next_load
from exporter.jobs.trial import SHARDS_REASON, TrialReport

RunTrial = Callable[[int, float, bool], Awaitable[TrialReport]]  # (index, load, may stop early)
OnTrial = Callable[[TrialReport], None]
Afford = Callable[[float], str | None]  # a reason not to run a trial at this load, or None


@dataclass
class CapacityResult:
    """The outcome of a search. ``capacity`` is None when no load passed; ``bracketed`` is False when
    the search never saw a failure (the capacity is at least ``capacity``, e.g. capped by max_load)."""

    load_kind: str
    capacity: float | None
    bracketed: bool
    converged: bool
    stopped_by: str  # "converged", "max_load", "min_load", "max_trials", a budget reason, or "shards: ..."
    trials: list[TrialReport] = field(default_factory=list)
    slo: dict[str, Any] = field(default_factory=dict)

    @property
    def at_capacity(self) -> TrialReport | None:
        """The trial that passed at the reported capacity."""
        return next((t for t in self.trials if t.passed and t.load == self.capacity), None)

    @property
    def tokens(self) -> int:
        return sum(t.tokens for t in self.trials)

    @property
    def duration_s(self) -> float:
        return sum(t.duration_s for t in self.trials)

    def figure(self, name: str) -> float | None:
        """A figure of the trial at capacity: ``fluid_token_rate``, ``goodput_ratio``, ``goodput_rate``."""
        trial = self.at_capacity
        if trial is None:
            return None
        good = trial.figures.get("goodput") or {}
        value = {
            "fluid_token_rate": trial.figures.get("fluid_token_rate"),
            "goodput_ratio": good.get("ratio"),
            "goodput_rate": good.get("rate_per_s"),
        }[name]
        return float(value) if value is not None and math.isfinite(value) else None

    def to_dict(self) -> dict[str, Any]:
        unit = "requests_per_second" if self.load_kind == "rate" else "concurrency"
        return {
            "load_kind": self.load_kind,
            "unit": unit,
            "capacity": self.capacity,
            "bracketed": self.bracketed,
            "converged": self.converged,
            "stopped_by": self.stopped_by,
            "fluid_token_rate_at_capacity": self.figure("fluid_token_rate"),
            "goodput_ratio_at_capacity": self.figure("goodput_ratio"),
            "goodput_rate_at_capacity": self.figure("goodput_rate"),
            "trial_count": len(self.trials),
            "tokens": self.tokens,
            "duration_s": self.duration_s,
            "slo": self.slo,
            "trials": [t.to_dict() for t in self.trials],
        }


def observation(trial: TrialReport) -> Observation:
    return Observation(trial.load, trial.passed, trial.headroom)


async def search_capacity(
    settings: SearchSettings,
    run_trial: RunTrial,
    *,
    load_kind: str = "rate",
    slo: dict[str, Any] | None = None,
    on_trial: OnTrial | None = None,
    afford: Afford | None = None,
    early_stop: bool = True,
) -> CapacityResult:
    """Run trials until ``next_load`` says the search is over (or ``afford`` refuses the next one)."""
    trials: list[TrialReport] = []
    history: list[Observation] = []
    stopped_by = ""
    while (load := next_load(settings, history)) is not None:
        refusal = afford(load) if afford is not None else None
        if refusal is not None:
            stopped_by = refusal
            break
        # The first failure runs in full: its headroom anchors the interpolation, and a trial stopped
        # early shows only the requests quick enough to finish, which hides how far past capacity it
        # was (measured: headroom 0.92 when stopped, 0.28 in full, at 1.5x the capacity). Near the
        # capacity, where the later failures land, that bias is small and stopping saves tokens.
        may_stop = early_stop and any(not t.passed for t in trials)
        trial = await run_trial(len(trials) + 1, load, may_stop)
        trials.append(trial)
        if trial.reason == SHARDS_REASON:
            # The load was not the planned one (a shard late, dead or saturated): nothing to learn
            # about the target from it, and the next trial's shards are no safer.
            stopped_by = "shards: " + "; ".join(trial.figures["shards"]["problems"])
            if on_trial is not None:
                on_trial(trial)
            break
        history.append(observation(trial))
        if on_trial is not None:
            on_trial(trial)
    found = bracket(history)
    return CapacityResult(
        load_kind=load_kind,
        capacity=capacity(history),
        bracketed=found.high is not None,
        converged=converged(settings, found),
        stopped_by=stopped_by or _why_stopped(settings, history),
        trials=trials,
        slo=slo or {},
    )


def _why_stopped(settings: SearchSettings, history: list[Observation]) -> str:
    found = bracket(history)
    if converged(settings, found):
        return "converged"
    if found.low is None and found.high is not None:
        return "min_load"  # not even the smallest load tried passed
    if found.high is None and found.low is not None and found.low.load >= settings.max_load:
        return "max_load"
    return "max_trials"
