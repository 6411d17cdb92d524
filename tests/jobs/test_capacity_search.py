"""The capacity search on synthetic headroom curves: where it puts trials, when it stops, what it reports."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.jobs.capacity_loop import TrialAsk, search_capacity
from exporter.jobs.capacity_search import (
    MIN_RATE,
    Bracket,
    Observation,
    SearchSettings,
    State,
    bracket,
    capacity,
    converged,
    next_load,
)
from exporter.jobs.trial_verdict import TrialReport

TRUTH = 10.0
Curve = Callable[[float], float]  # load -> headroom; the SLO holds where it is >= 1


def log_linear(load: float) -> float:
    """What the simulator shows below the knee: log(headroom) falls linearly with load."""
    return math.exp(0.2 * (TRUTH - load))


def convex(load: float) -> float:
    """Headroom inversely proportional to load, squared: log(headroom) convex in load."""
    return (TRUTH / load) ** 2


def concave(load: float) -> float:
    """log(headroom) falling faster near the knee: a line through two light loads overshoots."""
    return math.exp(2.0 * (1.0 - (load / TRUTH) ** 2))


def flat_then_cliff(load: float) -> float:
    """Barely above 1 for a long way below the capacity, then a cliff."""
    return 1.05 - 0.05 * load / TRUTH if load <= TRUTH else max(1.0 - 3.0 * (load / TRUTH - 1.0), 0.01)


def cliff_then_flat(load: float) -> float:
    """Falls steadily to the capacity, then stays just below 1 (Mistral-7B with 512-token chunks)."""
    return math.exp(0.3 * (TRUTH - load)) if load <= TRUTH else 0.98 - 0.02 * (load / TRUTH - 1.0)


SMOOTH = {"log_linear": log_linear, "convex": convex, "concave": concave}
STARTS = [0.5, 1.0, 2.0, 3.7, 6.0, 9.0, 9.9, 10.5, 14.0, 25.0, 60.0]


def search(
    config: SearchSettings, curve: Curve, passes: Callable[[float], bool] | None = None
) -> list[Observation]:
    history: list[Observation] = []
    while (load := next_load(config, history)) is not None:
        assert all(o.load != load for o in history), f"load {load} tried twice"
        headroom = curve(load)
        history.append(Observation(load, headroom >= 1.0 if passes is None else passes(load), headroom))
    return history


def within_tolerance(found: float | None, truth: float, tolerance: float) -> bool:
    return found is not None and truth / (1.0 + tolerance) * (1 - 1e-9) <= found <= truth * (1 + 1e-9)


@pytest.mark.parametrize("name", SMOOTH)
@pytest.mark.parametrize("start", STARTS)
def test_smooth_curves_converge_within_tolerance(name: str, start: float) -> None:
    config = SearchSettings(start=start, max_load=1000.0)
    history = search(config, SMOOTH[name])
    assert converged(config, bracket(history))
    assert within_tolerance(capacity(history), TRUTH, config.tolerance)
    assert len(history) <= 7  # max_trials is 8: a smooth curve leaves room to spare


@pytest.mark.parametrize("curve", [flat_then_cliff, cliff_then_flat])
@pytest.mark.parametrize("start", STARTS)
def test_flat_curves_never_report_above_the_capacity(curve: Curve, start: float) -> None:
    """A flat headroom makes the line a poor guide: the search may run out of trials, but what it
    reports is always a load that passed, and with trials to spare it converges."""
    history = search(SearchSettings(start=start, max_load=1000.0), curve)
    found = capacity(history)
    assert found is None or found <= TRUTH
    roomy = SearchSettings(start=start, max_load=1000.0, max_trials=30)
    assert within_tolerance(capacity(search(roomy, curve)), TRUTH, roomy.tolerance)


@settings(max_examples=200, deadline=None)
@given(
    truth=st.floats(0.05, 500.0),
    idle_headroom=st.floats(1.5, 30.0),
    start_factor=st.floats(0.02, 20.0),
    tolerance=st.sampled_from([0.02, 0.05, 0.1]),
)
def test_log_linear_curves_of_any_scale(
    truth: float, idle_headroom: float, start_factor: float, tolerance: float
) -> None:
    slope = math.log(idle_headroom) / truth

    def curve(load: float) -> float:
        return math.exp(slope * (truth - load))

    start = max(truth * start_factor, MIN_RATE)
    config = SearchSettings(start=start, max_load=truth * 100.0, tolerance=tolerance, max_trials=12)
    history = search(config, curve)
    assert converged(config, bracket(history)), history
    assert within_tolerance(capacity(history), truth, tolerance)


def test_noisy_pass_above_a_failure_is_ignored() -> None:
    history = [
        Observation(5.0, True, 2.0),
        Observation(10.5, False, 0.98),
        Observation(11.0, True, 1.01),  # noise: a pass above the lowest failure
        Observation(9.0, True, 1.1),
    ]
    assert bracket(history) == Bracket(history[3], history[1])
    assert capacity(history) == 9.0


def test_missed_bets_halve_the_kept_end() -> None:
    """Passes with a flat headroom of 1.02 creep up by the tolerance, each a bet that the next trial at
    ``lo * 1.05`` fails (plain regula falsi keeps betting there). Once a bet has missed and the failure
    at 10 was kept twice in a row, its log(headroom) is halved per trial that keeps it: the line leaves
    the creeping end."""
    config = SearchSettings(start=5.0, max_load=100.0)
    history = [Observation(10.0, False, 0.5), Observation(5.0, True, 1.02)]
    for _ in range(3):  # the kept end weighs 1, 1, 0.5: still a bet each time
        load = next_load(config, history)
        assert load == pytest.approx(history[-1].load * 1.05)
        history.append(Observation(load, True, 1.02))
    low, h_low, h_high = history[-1].load, math.log(1.02), 0.25 * math.log(0.5)
    expected = low + (10.0 - low) * h_low / (h_low - h_high)
    assert expected > low * 1.05
    assert next_load(config, history) == pytest.approx(expected)


def test_search_with_noisy_passes_above_the_capacity() -> None:
    """Loads between 2% and 6% above the capacity pass by luck: the search reports a load below the
    lowest failure it saw, within tolerance of the capacity."""

    def passes(load: float) -> bool:
        return load <= TRUTH or TRUTH * 1.02 < load < TRUTH * 1.06

    for start in STARTS:
        history = search(SearchSettings(start=start, max_load=1000.0), log_linear, passes)
        found = capacity(history)
        lowest_failure = min(o.load for o in history if not o.passed)
        assert found is not None and found < lowest_failure
        assert TRUTH / 1.05 * (1 - 1e-9) <= found <= TRUTH * 1.06


def test_integer_loads_for_concurrency() -> None:
    def curve(load: float) -> float:
        return math.exp(0.05 * (37.5 - load))  # concurrency 37 passes, 38 fails

    for start in (1.0, 4.0, 16.0, 37.0, 90.0):
        config = SearchSettings(start=start, max_load=1000.0, integer=True)
        history = search(config, curve)
        assert all(o.load == int(o.load) and o.load >= 1 for o in history)
        assert converged(config, bracket(history))
        assert within_tolerance(capacity(history), 37.0, config.tolerance)


def test_integer_search_ends_on_neighbours() -> None:
    config = SearchSettings(start=2.0, max_load=100.0, integer=True, tolerance=0.01)
    assert converged(config, Bracket(Observation(3.0, True, 1.1), Observation(4.0, False, 0.9)))
    assert not converged(config, Bracket(Observation(3.0, True, 1.1), Observation(5.0, False, 0.9)))
    assert next_load(config, [Observation(3.0, True, 1.1), Observation(5.0, False, 0.9)]) == 4.0


def test_max_load_caps_a_search_that_never_fails() -> None:
    config = SearchSettings(start=3.0, max_load=50.0)
    history = search(config, lambda load: 3.0)
    assert history[-1].load == 50.0
    assert all(o.passed for o in history)
    assert capacity(history) == 50.0
    assert next_load(config, history) is None
    assert not converged(config, bracket(history))


def test_nothing_passes_down_to_the_smallest_load() -> None:
    history = search(SearchSettings(start=10.0, max_load=100.0, max_trials=30), lambda load: 0.1)
    assert capacity(history) is None
    assert history[-1].load == MIN_RATE
    loads = [o.load for o in history]
    assert loads == sorted(loads, reverse=True)
    assert all(b / a >= 0.25 - 1e-12 for a, b in itertools.pairwise(loads))

    integer = search(SearchSettings(start=8.0, max_load=100.0, integer=True), lambda load: 0.1)
    assert [o.load for o in integer] == [8.0, 2.0, 1.0]


def test_a_failed_trial_that_measured_nothing_shrinks_by_the_most() -> None:
    config = SearchSettings(start=10.0, max_load=100.0)
    assert next_load(config, [Observation(10.0, False, math.nan)]) == pytest.approx(2.5)


def test_max_trials_ends_the_search() -> None:
    config = SearchSettings(start=1.0, max_load=1000.0, max_trials=3)
    history = search(config, log_linear)
    assert len(history) == 3
    assert next_load(config, history) is None


def test_convergence_survives_rounding() -> None:
    """A pass at ``hi / (1 + tolerance)`` ends the search for every ``hi`` (``hi / t * t`` can fall an
    ulp short of ``hi``)."""
    config = SearchSettings(start=1.0, max_load=1000.0)
    for i in range(2000):
        high = 0.37 + i * 0.0137
        found = Bracket(Observation(high / 1.05, True, 1.01), Observation(high, False, 0.99))
        assert converged(config, found)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"start": 0.0, "max_load": 10.0}, "start must be in"),
        ({"start": 20.0, "max_load": 10.0}, "start must be in"),
        ({"start": 1.0, "max_load": 10.0, "tolerance": 0.0}, "tolerance must be in"),
        ({"start": 1.0, "max_load": 10.0, "max_trials": 0}, "max_trials must be"),
        ({"start": 1.0, "max_load": 10.0, "growth": 1.0}, "growth must be in"),
    ],
)
def test_settings_are_validated(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SearchSettings(**kwargs)  # type: ignore[arg-type]


def report(index: int, load: float, curve: Curve) -> TrialReport:
    headroom = curve(load)
    passed = headroom >= 1.0
    return TrialReport(index, load, passed, "pass" if passed else "slo", headroom, {}, 100, 1.0, 1000)


@pytest.mark.parametrize(
    ("config", "curve", "stopped_by", "state"),
    [
        (SearchSettings(start=2.0, max_load=1000.0), log_linear, "converged", State.FOUND),
        (SearchSettings(start=2.0, max_load=20.0), lambda load: 2.0, "max_load", State.LOWER_BOUND),
        (SearchSettings(start=2.0, max_load=20.0, max_trials=30), lambda load: 0.5, "floor", State.NOT_MET),
        (
            SearchSettings(start=2.0, max_load=1000.0, max_trials=2),
            log_linear,
            "max_trials",
            State.LOWER_BOUND,
        ),
    ],
)
async def test_search_capacity_reports_why_it_stopped(
    config: SearchSettings, curve: Curve, stopped_by: str, state: State
) -> None:
    may_stop: list[bool] = []

    async def run_trial(ask: TrialAsk) -> TrialReport:
        index, load, stop = ask.index, ask.load, ask.may_stop
        may_stop.append(stop)
        return report(index, load, curve)

    result = await search_capacity(config, run_trial)
    assert result.stopped_by == stopped_by
    assert result.state is state
    assert result.converged is (stopped_by == "converged")
    assert (result.capacity is not None) is (state is State.FOUND)
    # Early stopping only after the first failure: that one runs in full to anchor the line.
    first_failure = next((t.index for t in result.trials if not t.passed), len(result.trials) + 1)
    assert may_stop == [t.index > first_failure for t in result.trials]
    assert result.tokens == 1000 * len(result.trials)
