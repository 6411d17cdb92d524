"""Where to put the next trial of a capacity search: a pure function of the trials so far.

The search looks for the highest load at which the SLO holds, to a relative tolerance: it ends when a
passing load ``lo`` and a failing load ``hi`` satisfy ``hi <= lo * (1 + tolerance)``, so the capacity
(somewhere in ``[lo, hi)``) is ``lo`` within the tolerance. ``lo`` is reported: a load that was seen to
pass, never an extrapolation.

Etalon bisects an interval that starts at ``[0, 2 x start]`` and doubles its top while passes land near
it. This search spends fewer trials because every trial reports its *headroom* (``exporter.stats.headroom``:
how much tighter every deadline could be and still pass; >= 1 passes), which falls smoothly with load.

The search works on ``log(headroom)``, which is 0 at the capacity and, measured on the simulator's
engine, falls close to linearly with load all the way from light load to the knee (headroom 6.3, 5.3,
3.8, 2.2, 1.4, 1.0 at 1, 2, 4, 6.6, 8.8, 10.5 req/s: log slopes -0.17 to -0.21 per req/s), where the
headroom itself is strongly convex and a line through it undershoots again and again.

1. Bracket. From the start load, grow until a trial fails: after one pass by its headroom (at least
   ``growth``, at most ``max_growth`` times); after two, to where the line through the two highest
   passes reaches ``log(headroom) = 0``, plus the tolerance, so the first failure lands just past
   the capacity. A first trial that fails shrinks the load by its headroom (at least by half, at most
   to a quarter).
2. Narrow. Between ``lo`` and ``hi``, interpolate linearly on ``log(headroom)`` (regula falsi). When
   the estimate lies within the tolerance of one end, the trial goes where the expected result ends the
   search: at ``lo * (1 + tolerance)`` when a failure is expected, at ``hi / (1 + tolerance)`` when a
   pass is. Without a usable line (a headroom on the wrong side of 1, or none), the trial bisects
   (geometric midpoint).

Where the headroom is flat near the capacity (measured: Mistral-7B with 512-token chunked prefill,
whose chunk steps take about ``Dd``, keeps a headroom of 0.94-0.99 from the capacity to 1.4x it), the
line lands near one end again and again and the search creeps by the tolerance per trial; ``max_trials``
bounds it. Bisecting once the same end moved twice (regula falsi's textbook remedy, which this module
once described but never triggered) was measured on ``bench/capacity_bench.py``'s twelve scenarios at
nine starts each (0.15x to 3.5x the capacity): mean trials 5.26 -> 5.56, runs within 6 trials 99 -> 84
of 108; bisecting after a missed "ends the search" trial: 5.44 and 88 of 108. Creeping is cheaper: most
creeps end within two trials, and failing trials near the capacity stop early.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

MIN_RATE = 0.01  # requests/s: below this a rate search gives up ("no capacity")
# Headroom is clipped to this range (the range ``exporter.stats.headroom`` searches) before its log is
# taken: a trial whose every request failed has headroom 0.
HEADROOM_RANGE = (1.0 / 64.0, 64.0)
EDGE_GUARD = 0.1  # an interpolated load stays this share of the interval away from both ends


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

    @property
    def min_load(self) -> float:
        return 1.0 if self.integer else MIN_RATE


@dataclass(frozen=True)
class Observation:
    """One trial as the search sees it. ``headroom``: NaN when the trial measured nothing."""

    load: float
    passed: bool
    headroom: float


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


def next_load(settings: SearchSettings, history: Sequence[Observation]) -> float | None:
    """The load of the next trial, or None when the search is over (converged, out of trials, the
    capacity is at or above ``max_load``, or not even the smallest load passes)."""
    if len(history) >= settings.max_trials:
        return None
    if not history:
        return _fit(settings, settings.start)
    found = bracket(history)
    if converged(settings, found):
        return None
    if found.high is None:
        assert found.low is not None  # history is not empty and nothing failed
        return _grow(settings, history, found.low)
    if found.low is None:
        return _shrink(settings, found.high)
    return _narrow(settings, history, found.low, found.high)


def capacity(history: Sequence[Observation]) -> float | None:
    """The answer of a search: the highest passing load below the lowest failing one (None if none)."""
    low = bracket(history).low
    return low.load if low is not None else None


def _grow(settings: SearchSettings, history: Sequence[Observation], last: Observation) -> float | None:
    if last.load >= settings.max_load:
        return None  # the capacity is at least max_load: the search may not go higher
    target = last.load * min(max(_clipped(last.headroom), settings.growth), settings.max_growth)
    estimate = _extrapolate(history, last)
    if estimate is not None:
        target = estimate * (1.0 + settings.tolerance)
    lowest, highest = last.load * (1.0 + settings.tolerance), last.load * settings.max_growth
    return _distinct(settings, history, min(max(target, lowest), highest, settings.max_load))


def _extrapolate(history: Sequence[Observation], last: Observation) -> float | None:
    """Where the line through the two highest passing loads reaches ``log(headroom) = 0`` (None unless
    it falls)."""
    below = [o for o in history if o.passed and o.load < last.load and math.isfinite(o.headroom)]
    if not below or not math.isfinite(last.headroom):
        return None
    previous = max(below, key=lambda o: o.load)
    slope = (_log(last.headroom) - _log(previous.headroom)) / (last.load - previous.load)
    if slope >= 0.0:
        return None
    return last.load + _log(last.headroom) / -slope


def _shrink(settings: SearchSettings, failed: Observation) -> float | None:
    if failed.load <= settings.min_load:
        return None  # not even the smallest load passes
    target = failed.load * min(max(_clipped(failed.headroom), 0.25), 0.5)
    return _fit(settings, max(target, settings.min_load))


def _narrow(
    settings: SearchSettings, history: Sequence[Observation], low: Observation, high: Observation
) -> float | None:
    width = high.load - low.load
    estimate = _interpolate(low, high)
    if estimate is None:
        target = math.sqrt(low.load * high.load)
    else:
        target = min(max(estimate, low.load + EDGE_GUARD * width), high.load - EDGE_GUARD * width)
        tol = 1.0 + settings.tolerance
        if high.load <= estimate * tol:
            target = high.load / tol  # expected to pass, which ends the search
        elif low.load * tol >= estimate:
            target = low.load * tol  # expected to fail, which ends the search
    return _inside(settings, target, low.load, high.load)


def _interpolate(low: Observation, high: Observation) -> float | None:
    """The load where the straight line between the two ends reaches ``log(headroom) = 0``."""
    if math.isnan(low.headroom) or math.isnan(high.headroom):
        return None
    h_low, h_high = _log(low.headroom), _log(high.headroom)
    if h_low < 0.0 or h_high >= 0.0:
        return None  # noisy headroom on the wrong side of 1: no trustworthy line
    return low.load + (high.load - low.load) * h_low / (h_low - h_high)


def _clipped(headroom: float) -> float:
    """Headroom within ``HEADROOM_RANGE`` (NaN, a trial that measured nothing, counts as the floor)."""
    low, high = HEADROOM_RANGE
    return low if math.isnan(headroom) else min(max(headroom, low), high)


def _log(headroom: float) -> float:
    return math.log(_clipped(headroom))


def _inside(settings: SearchSettings, target: float, low: float, high: float) -> float | None:
    if not settings.integer:
        return target
    whole = min(max(round(target), math.floor(low) + 1), math.ceil(high) - 1)
    return float(whole) if low < whole < high else None


def _fit(settings: SearchSettings, load: float) -> float:
    load = min(load, settings.max_load)
    return float(max(round(load), 1)) if settings.integer else load


def _distinct(settings: SearchSettings, history: Sequence[Observation], load: float) -> float | None:
    fitted = _fit(settings, load)
    if any(o.load == fitted for o in history):
        fitted = _fit(settings, fitted + 1.0) if settings.integer else fitted
    if any(o.load == fitted for o in history):
        return None
    return fitted
