"""A capacity search as pure values and steps: what its trials show so far, and where the next goes.

What the trials show: each as the search sees it (``Observation``), trials at one load pooled (counts
summed), each load's verdict from its pass fraction's confidence interval, the bracket (the highest pass
below the lowest failure), whether it is within the tolerance, and what the search found (``State``).
Where the next trial goes: ``next_load``, a pure function of the trials so far.

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
   passes reaches ``log(headroom) = 0``, plus half the tolerance (``AIM_PAST``), so the first failure
   lands just past the capacity. A first trial that fails shrinks the load by its headroom (at least
   by half, at most to a quarter).
2. Narrow. Between ``lo`` and ``hi``, interpolate linearly on ``log(headroom)`` (regula falsi). When
   the estimate lies within the tolerance of one end, the trial goes where the expected result ends the
   search: at ``lo * (1 + tolerance)`` when a failure is expected, at ``hi / (1 + tolerance)`` when a
   pass is. Without a usable line (a headroom on the wrong side of 1, or none), the trial bisects
   (geometric midpoint). Once such a bet has missed and the end it left in place has stayed put for two
   narrowing trials in a row, that end's ``log(headroom)`` is halved, and halved again for each further
   trial that leaves it in place (the Illinois variant of regula falsi, ``_illinois``).

Where the headroom is flat near the capacity (measured: Mistral-7B with 512-token chunked prefill,
whose chunk steps take about ``Dd``, keeps a headroom of 0.94-0.99 from the capacity to 1.4x it), the
line lands near one end again and again and the search creeps by the tolerance per trial; ``max_trials``
bounds it. Bisecting once the same end moved twice (regula falsi's textbook remedy) was measured on
``bench/capacity_bench.py``'s twelve scenarios at nine starts each (0.15x to 3.5x the capacity): mean
trials 5.26 -> 5.56, runs within 6 trials 99 -> 84 of 108; bisecting after a missed "ends the search"
trial: 5.44 and 88 of 108. Most creeps end within two trials, so the gentler Illinois step waits for a
missed bet: a single missed bet is usually followed by one that ends the search, and halving the far
end's ``log(headroom)`` each time it is kept moves the line off the creeping end within a few trials.
Measured on the bench's 48 runs against plain regula falsi: within 5% 47 -> 47 of 48 (largest error
30% -> 6.2%: a creep of failures that ran out of trials with only the start passing), within 6 trials
43 -> 44, tokens unchanged (median 62% of Etalon's); at eleven starts per scenario (132 runs): within 5%
128 -> 129, within 6 trials 119 -> 120, runs more than 10% off 4 -> 1, mean trials 5.05 -> 5.07. Halving
after any two trials that kept one end (without a missed bet) cost trials: within 6 trials 43 -> 42 of
48, 119 -> 114 of 132.

Placed by a model of the engine (``capacity_model``, ``exporter.stats.engine_model``), where a rate
search has one: every trial's decode gaps fit ``W + H n`` over the requests decoding, Little's law turns
that into the gap at a load, and the trials nearest the knee calibrate the headroom against the gap; the
model is refitted after every trial. Growing, the next trial goes half a tolerance below its predicted
knee (a pass there and a failure a tolerance above end the search), never past what the headroom
growth allows (where prefill steps make the knee, the decode model overshoots); shrinking, to the same
point when it is below the failure; narrowing, the knee replaces the line while the bracket does not
rule it out and no end creeps (then the Illinois step above takes over). The model only places
trials: state and bracket come from measured trials alone. ``SearchSettings.predict`` turns it on; it
is off by default, as on ``bench/capacity_bench.py`` it bought nothing over the headroom (the same
tokens in the median, one run 39% low), and the prediction is reported either way.

Bounded, and said as found. A search ends: below ``floor`` (``min_load``) a failing load is not halved
again ("the SLO is not met at any load we can offer"), nor below a failure whose requests that had the
engine to themselves (nothing else of ours in flight) confidently missed the SLO: a lower load only
leaves more requests alone, no faster (seen: a target whose first token takes 3 s under a 1 s prefill
deadline was searched from 4 down to 0.067 req/s, trials of up to 23 minutes planned); above ``max_load`` it does not grow, and
``max_trials`` (with the caller's token and time budgets) bound the rest. ``outcome`` names what it
found: ``found`` (a confident pass below a confident failure, within the tolerance), ``lower_bound``
(still passing when the ceiling or a budget stopped it), ``not_met`` (no load tried passed) or
``inconclusive`` (the two ends are within the tolerance but one of them could not be told apart from
the objective).

Statistically honest. With ``required`` set (the share of requests that must meet the target), each
load's verdict is judged from a confidence interval of its pass fraction (``exporter.stats.binomial``):
a trial of 200 requests at p99 is decided by two or three of them, so an interval straddling the
objective makes the load *inconclusive*. Trials at one load are pooled. Steering uses the point
verdicts and the headroom, as before; but where the search would end, an inconclusive end is run again
(``max_parts`` times per load at most) before the search believes it: a repeat there reduces the
uncertainty of the answer most, and a repeat far from the answer would change nothing it reports. It is
repeated only where more trials like its own could settle it (``could_settle``): at p99 a load with one
miss in 200 stays inconclusive even over 600 requests, so those repeats would spend tokens for nothing.
Nor is an end repeated unless the other end is confident already: with both unsure, the search would
need two settled repeats (or more) to end ``found``.

A repeat at the lower end runs for its pass alone: it is told the counts seen there (``settling``,
``TrialPlan.settle``) and stops at the miss that makes a confident pass impossible (at p99 after 200
of 200, its first). Run on, it would only re-judge the load's point verdict on a new sample, whose
capacity differs from the first one's by 5-10%: measured on ``bench/capacity_bench.py``, repeats that
went on to fail moved the answer more than 5% below the capacity in 8 of 48 runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from exporter.jobs.capacity_model import EngineSample, predict
from exporter.stats.binomial import DEFAULT_CONFIDENCE, Interval, Method, Verdict, classify_fraction, interval

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
    # Trials after the first failure may stop once they are a confident failure (``TrialPlan.early_stop``)
    early_stop: bool = True
    # Seconds the whole search may take (trial durations and drain waits, summed; None: no bound): a
    # trial starts only while there is time left, and runs for at most what is left
    time_budget_s: float | None = None

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
    def load_kind(self) -> str:
        """``concurrency`` for a search of whole requests in flight, else ``rate``."""
        return "concurrency" if self.integer else "rate"

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


EDGE_GUARD = 0.1  # an interpolated load stays this share of the interval away from both ends
# The first failure is aimed this share of the tolerance past the line's estimate (a whole tolerance
# before): where the line overshoots (from two light loads it lands about 10% past the capacity on
# Llama-3.1-8B + ShareGPT) that failure lands nearer the capacity, and the next trials close sooner.
# Measured on bench/capacity_bench.py against a whole tolerance: 62.5% of Etalon's tokens in the
# median (63.7%), 11/48 runs at <= 50% (9), within 5% and within 6 trials unchanged (46, 42 of 48).
AIM_PAST = 0.5
# With the engine model's knee, a growing search aims this share of the tolerance below it: a pass
# there leaves the failure that ends the search within the tolerance above.
AIM_BELOW = 0.5


def next_load(settings: SearchSettings, history: Sequence[Observation]) -> float | None:
    """The load of the next trial, or None when the search is over (converged, out of trials, the
    capacity is at or above ``max_load``, or not even the smallest load passes)."""
    if len(history) >= settings.max_trials:
        return None
    if not history:
        return _fit(settings, settings.start)
    predicted = predict(settings, history) if settings.predict else None
    knee = predicted.load if predicted is not None else None
    history = pool(settings, history)
    found = bracket(history)
    if converged(settings, found):
        return _confirm(settings, found)
    if found.high is None:
        assert found.low is not None  # history is not empty and nothing failed
        return _grow(settings, history, found.low, knee)
    if found.low is None:
        return _shrink(settings, found.high, knee)
    return _narrow(settings, history, found.low, found.high, knee)


def _confirm(settings: SearchSettings, found: Bracket) -> float | None:
    """The search would end here: run an inconclusive end again, but only where that alone could make
    the search end ``found``: the other end is already confident, the end ran fewer than ``max_parts``
    times and more trials like its own could settle it. With both ends unsure (at p99, 200 of 200 at
    ``low`` and 196 of 200 at ``high``) both would have to settle, a trial or more each, and one that
    cannot (197 of 200 stays inconclusive even over 600) makes repeating the other worthless."""
    unsure = [
        end for end in (found.low, found.high)
        if end is not None and verdict(settings, end) is Verdict.INCONCLUSIVE
    ]  # fmt: skip
    if len(unsure) == 1 and unsure[0].parts < settings.max_parts and could_settle(settings, unsure[0]):
        return unsure[0].load
    return None


def settling(settings: SearchSettings, history: Sequence[Observation], load: float) -> tuple[int, int] | None:
    """(successes, requests) seen at ``load`` when the next trial there is run to settle the lower
    end's pass (None otherwise). Such a trial can stop once its misses make the pass impossible
    (``exporter.jobs.trial.stop_reason``): it was run for that pass alone."""
    found = bracket(pool(settings, history))
    low = found.low
    if low is None or low.load != load or not converged(settings, found):
        return None
    if low.successes is None or not low.requests or verdict(settings, low) is not Verdict.INCONCLUSIVE:
        return None
    return low.successes, low.requests


def could_settle(settings: SearchSettings, end: Observation) -> bool:
    """Whether the load's verdict would be settled if it ran the rest of its ``max_parts`` trials and
    they went as its trials so far (the same pass fraction, pooled): a repeat is worth its tokens only
    then. At p99, 199 of 200 fluid (a fraction of 0.995) stays inconclusive even over 600 requests
    (597 of 600: the interval's low end is 0.986), so the repeats would buy nothing; 200 of 200 could
    reach a pass (600 of 600: 0.995), and 195 of 200 a failure (585 of 600: the high end is 0.985)."""
    if settings.required is None or end.successes is None or not end.requests:
        return False
    scale = settings.max_parts / end.parts
    requests = round(end.requests * scale)
    successes = round(end.successes * scale)
    settled = classify_fraction(successes, requests, settings.required, settings.confidence, settings.method)
    return settled is not Verdict.INCONCLUSIVE


def _grow(
    settings: SearchSettings, history: Sequence[Observation], last: Observation, knee: float | None
) -> float | None:
    if last.load >= settings.max_load:
        return None  # the capacity is at least max_load: the search may not go higher
    target = last.load * min(max(clipped_headroom(last.headroom), settings.growth), settings.max_growth)
    estimate = _extrapolate(history, last)
    if knee is not None:
        # Just below the predicted knee: a pass there, and a failure a tolerance above it, end the
        # search; the failure after a pass may stop early, the first failure runs in full. Never past
        # what the measured headroom allows: where prefill steps, not decode, make the knee (Mistral-7B,
        # chunked: one trial's model put it past 4x the capacity), the model overshoots.
        target = min(knee / (1.0 + AIM_BELOW * settings.tolerance), target)
    elif estimate is not None:
        target = estimate * (1.0 + AIM_PAST * settings.tolerance)
    lowest, highest = last.load * (1.0 + settings.tolerance), last.load * settings.max_growth
    return _distinct(settings, history, min(max(target, lowest), highest, settings.max_load))


def _extrapolate(history: Sequence[Observation], last: Observation) -> float | None:
    """Where the line through the two highest passing loads reaches ``log(headroom) = 0`` (None unless
    it falls)."""
    below = [o for o in history if o.passed and o.load < last.load and math.isfinite(o.headroom)]
    if not below or not math.isfinite(last.headroom):
        return None
    previous = max(below, key=lambda o: o.load)
    slope = (log_headroom(last.headroom) - log_headroom(previous.headroom)) / (last.load - previous.load)
    if slope >= 0.0:
        return None
    return last.load + log_headroom(last.headroom) / -slope


def _shrink(settings: SearchSettings, failed: Observation, knee: float | None) -> float | None:
    if hopeless(settings, failed):
        return None  # not even the smallest load passes, or the SLO fails with the engine idle
    target = failed.load * min(max(clipped_headroom(failed.headroom), 0.25), 0.5)
    if knee is not None and knee < failed.load:
        # Never above what the headroom says: a decode model blind to a prefill-bound knee put it at
        # 0.78x a failure that the headroom (0.12) put at 4x the capacity, and the search crept down.
        target = max(min(knee / (1.0 + AIM_BELOW * settings.tolerance), target), failed.load * 0.25)
    return _fit(settings, max(target, settings.min_load))


def _narrow(
    settings: SearchSettings,
    history: Sequence[Observation],
    low: Observation,
    high: Observation,
    knee: float | None = None,
) -> float | None:
    width = high.load - low.load
    weights = _illinois(settings, history)
    estimate = _interpolate(low, high, weights)
    if knee is not None and low.load < knee < high.load and weights == (1.0, 1.0):
        # The engine model's knee, while the measured bracket does not rule it out and no end creeps:
        # where the headroom is flat (Mistral-7B, chunked: 0.96-0.98 from the capacity to 1.4x it) the
        # model's knee follows the failures down as the line does, and the Illinois step moves off.
        estimate = knee
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


def _illinois(settings: SearchSettings, history: Sequence[Observation]) -> tuple[float, float]:
    """Weights of the two ends' ``log(headroom)`` in the line (Illinois regula falsi): the end that the
    narrowing trials left in place ``k >= 2`` times in a row, the last of them a missed bet (a trial at
    ``lo * (1 + tolerance)`` or ``hi / (1 + tolerance)``, which did not end the search), weighs
    ``0.5 ** (k - 1)``; otherwise both weigh 1. A pure function of the trials, in their order."""
    kept: str | None = None  # "low" or "high": the end the last narrowing trial left in place
    times, bet = 0, False
    tol = 1.0 + settings.tolerance
    for index, item in enumerate(history):
        before = bracket(history[:index])
        low, high = before.low, before.high
        if low is None or high is None or not low.load < item.load < high.load:
            continue  # growing, shrinking or ignored (above a failure): not a narrowing trial
        end = "high" if item.passed else "low"
        times = times + 1 if end == kept else 1
        kept = end
        bets = (
            _inside(settings, low.load * tol, low.load, high.load),
            _inside(settings, high.load / tol, low.load, high.load),
        )
        bet = any(b is not None and math.isclose(item.load, b, rel_tol=1e-9) for b in bets)
    if times < 2 or not bet:
        return 1.0, 1.0
    factor = 0.5 ** (times - 1)
    return (factor, 1.0) if kept == "low" else (1.0, factor)


def _interpolate(
    low: Observation, high: Observation, weights: tuple[float, float] = (1.0, 1.0)
) -> float | None:
    """The load where the straight line between the two ends (their ``log(headroom)`` times
    ``weights``) reaches ``log(headroom) = 0``."""
    if math.isnan(low.headroom) or math.isnan(high.headroom):
        return None
    h_low, h_high = log_headroom(low.headroom) * weights[0], log_headroom(high.headroom) * weights[1]
    if h_low < 0.0 or h_high >= 0.0:
        return None  # noisy headroom on the wrong side of 1: no trustworthy line
    return low.load + (high.load - low.load) * h_low / (h_low - h_high)


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
