"""What a capacity search's trials show so far, as pure functions: each trial as the search sees it
(``Observation``), trials at one load pooled (counts summed), each load's verdict from its pass
fraction's confidence interval, the bracket (the highest pass below the lowest failure), whether it is
within the tolerance, and what the search found (``State``). Where the next trial goes is
``capacity_search``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from exporter.stats.binomial import DEFAULT_CONFIDENCE, Interval, Method, Verdict, classify_fraction, interval

if TYPE_CHECKING:
    from exporter.jobs.capacity_model import EngineSample

MIN_RATE = 0.01  # requests/s: below this a rate search gives up ("no capacity")
# Headroom is clipped to this range (the range ``exporter.stats.headroom`` searches) before its log is
# taken: a trial whose every request failed has headroom 0.
HEADROOM_RANGE = (1.0 / 64.0, 64.0)
MAX_PARTS = 3  # a load whose verdict is inconclusive where the search would end runs at most this often


class State(StrEnum):
    """What a search found (``capacity.json``, the jobs API and ``fluidity_capacity_state``)."""

    FOUND = "found"  # a confident pass below a confident failure, within the tolerance: a measurement
    LOWER_BOUND = "lower_bound"  # still passing when the ceiling, the trials or a budget stopped it
    NOT_MET = "not_met"  # no load tried passed (down to the floor, or until a budget ran out)
    INCONCLUSIVE = "inconclusive"  # bracketed within the tolerance, but an end straddles the objective
    # Stopped (Ctrl-C, SIGTERM, a cancelled or interrupted job) before it ended: what its trials
    # showed, the bracket so far, no answer
    INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class SearchSettings:
    """Bounds and steps of one search. ``integer``: loads are concurrencies (whole numbers >= 1)."""

    start: float
    max_load: float
    tolerance: float = 0.05
    max_trials: int = 8
    growth: float = 2.0
    max_growth: float = 4.0
    integer: bool = False
    floor: float | None = None  # lowest load tried (None: 1 for concurrencies, MIN_RATE for rates)
    required: float | None = None  # share of requests that must meet the target (None: point verdicts)
    confidence: float = DEFAULT_CONFIDENCE
    method: Method = "clopper-pearson"
    max_parts: int = MAX_PARTS
    # Place trials by the engine model's knee (``capacity_model``) where it has one. Off by default: on
    # bench/capacity_bench.py (12 scenarios x 4 starts) it spent the same tokens as the headroom's
    # placement (median ratio 100%), 46 of 48 runs within 5% (47) and 36 within 6 trials (44): a
    # decode model cannot see a prefill-bound knee. Its prediction is reported either way.
    predict: bool = False

    def __post_init__(self) -> None:
        if not 0.0 < self.start <= self.max_load:
            raise ValueError(
                f"start must be in (0, max_load], got {self.start} with max_load {self.max_load}"
            )
        if not 0.0 < self.tolerance < 1.0:
            raise ValueError(f"tolerance must be in (0, 1), got {self.tolerance}")
        if self.max_trials < 1:
            raise ValueError(f"max_trials must be >= 1, got {self.max_trials}")
        if not 1.0 < self.growth <= self.max_growth:
            raise ValueError(f"growth must be in (1, max_growth], got {self.growth}")
        if self.floor is not None and not 0.0 < self.floor <= self.start:
            raise ValueError(f"floor must be in (0, start], got {self.floor} with start {self.start}")

    @property
    def min_load(self) -> float:
        if self.floor is not None:
            return self.floor
        return 1.0 if self.integer else MIN_RATE


@dataclass(frozen=True)
class Observation:
    """One trial as the search sees it. ``headroom``: NaN when the trial measured nothing.

    ``successes`` of ``requests`` met the target (None: not counted, the point verdict decides);
    ``objectives_met``: every other objective of the SLO held (those are judged as points)."""

    load: float
    passed: bool
    headroom: float
    successes: int | None = None
    requests: int | None = None
    objectives_met: bool = True
    parts: int = 1
    # (missed, requests) of its requests that had the engine to themselves, when they confidently missed
    # the SLO (``TrialReport.fails_alone``): no lower load can pass
    idle_misses: tuple[int, int] | None = None
    # What it showed of the engine (``exporter.jobs.capacity_model.EngineSample``): the model's input
    engine: EngineSample | None = None


def pool(settings: SearchSettings, history: Sequence[Observation]) -> list[Observation]:
    """Trials at one load merged into one observation (counts summed, headroom's geometric mean),
    in order of first appearance. Without counts the load passes only if every trial at it passed."""
    merged: dict[float, list[Observation]] = {}
    for item in history:
        merged.setdefault(item.load, []).append(item)
    return [_merge(settings, parts) if len(parts) > 1 else parts[0] for parts in merged.values()]


def _merge(settings: SearchSettings, parts: Sequence[Observation]) -> Observation:
    objectives = all(p.objectives_met for p in parts)
    idle = next((p.idle_misses for p in parts if p.idle_misses is not None), None)
    logs = [log_headroom(p.headroom) for p in parts if not math.isnan(p.headroom)]
    headroom = math.exp(sum(logs) / len(logs)) if logs else math.nan
    if settings.required is None or any(p.successes is None or not p.requests for p in parts):
        passed = all(p.passed for p in parts)
        return Observation(parts[0].load, passed, headroom, parts=len(parts), idle_misses=idle)
    successes = sum(p.successes or 0 for p in parts)
    requests = sum(p.requests or 0 for p in parts)
    passed = objectives and successes >= math.ceil(settings.required * requests - 1e-9)
    return Observation(parts[0].load, passed, headroom, successes, requests, objectives, len(parts), idle)


def verdict(settings: SearchSettings, item: Observation) -> Verdict:
    """PASS, FAIL or INCONCLUSIVE: the pass fraction's interval against ``required`` (any other
    objective missed fails it); without counts or ``required``, the point verdict."""
    if settings.required is None or item.successes is None or not item.requests:
        return Verdict.PASS if item.passed else Verdict.FAIL
    if not item.objectives_met:
        return Verdict.FAIL
    return classify_fraction(
        item.successes, item.requests, settings.required, settings.confidence, settings.method
    )


def pass_interval(settings: SearchSettings, item: Observation) -> Interval | None:
    """The confidence interval of the load's pass fraction (None without counts)."""
    if item.successes is None or not item.requests:
        return None
    return interval(item.successes, item.requests, settings.confidence, settings.method)


@dataclass(frozen=True)
class Bracket:
    """The highest passing load below the lowest failing one (either may be missing)."""

    low: Observation | None
    high: Observation | None


def bracket(history: Sequence[Observation]) -> Bracket:
    """``high``: the lowest failing load; ``low``: the highest passing load below it. A pass above a
    failure (noise near the capacity) is ignored: the search stays on the side it can vouch for."""
    fails = [o for o in history if not o.passed]
    high = min(fails, key=lambda o: o.load, default=None)
    passes = [o for o in history if o.passed and (high is None or o.load < high.load)]
    low = max(passes, key=lambda o: o.load, default=None)
    return Bracket(low, high)


def converged(settings: SearchSettings, found: Bracket) -> bool:
    """Both ends known and close enough: the capacity is ``low`` within the tolerance."""
    low, high = found.low, found.high
    if low is None or high is None:
        return False
    if settings.integer and high.load - low.load <= 1:
        return True
    # The relative epsilon absorbs rounding: a pass placed at ``high / (1 + tolerance)`` must end the
    # search, and ``high / t * t`` falls an ulp short of ``high`` for about 2% of loads, which used to
    # repeat the same trial.
    return high.load <= low.load * (1.0 + settings.tolerance) * (1.0 + 1e-9)


def hopeless(settings: SearchSettings, failed: Observation) -> bool:
    """Whether no load below ``failed`` (the lowest failure, nothing passed) is worth a trial: it is at
    the floor, or its requests failed with the engine to themselves (``Observation.idle_misses``)."""
    return failed.load <= settings.min_load or failed.idle_misses is not None


def capacity(history: Sequence[Observation]) -> float | None:
    """The highest passing load below the lowest failing one (None if none): the answer when the
    outcome is ``found``, a lower bound otherwise."""
    low = bracket(history).low
    return low.load if low is not None else None


def outcome(settings: SearchSettings, history: Sequence[Observation]) -> State:
    """What the search found (its trials pooled by load)."""
    found = bracket(pool(settings, history))
    if found.low is None:
        return State.NOT_MET
    if not converged(settings, found):
        return State.LOWER_BOUND
    assert found.high is not None
    confident = verdict(settings, found.low) is Verdict.PASS and verdict(settings, found.high) is Verdict.FAIL
    return State.FOUND if confident else State.INCONCLUSIVE


def clipped_headroom(headroom: float) -> float:
    """Headroom within ``HEADROOM_RANGE`` (NaN, a trial that measured nothing, counts as the floor)."""
    low, high = HEADROOM_RANGE
    return low if math.isnan(headroom) else min(max(headroom, low), high)


def log_headroom(headroom: float) -> float:
    return math.log(clipped_headroom(headroom))
