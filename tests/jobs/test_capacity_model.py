"""Tests of exporter.jobs.capacity_model: the engine model's prediction from a search's trials, the
trials that contradict it, and the report beside the measured bracket; and on the simulator's engine
(virtual clock), how close the prediction lands to the search's measured answer."""

from __future__ import annotations

import pytest

from exporter.jobs.capacity_model import EngineSample, contradictions, predict, prediction_report
from exporter.jobs.capacity_search import Observation, SearchSettings
from exporter.stats.engine_model import DecodeBins, rate_at_gap, settled_gap
from tests.jobs.test_capacity_virtual import Bed

W, H, TOKENS = 0.008, 0.0004, 100.0
SETTINGS = SearchSettings(start=5.0, max_load=100.0)


def _sample() -> EngineSample:
    """Gaps of exactly ``W + H n`` at 1..40 running requests, with a 10% spread around the line."""
    running = tuple(range(1, 41))
    gaps = [W + H * n for n in running]
    count = (200,) * len(running)
    return EngineSample(
        DecodeBins(running, count, tuple(200 * g for g in gaps), tuple(200 * g * g * 1.01 for g in gaps)),
        TOKENS,
    )


def _trial(load: float, passed: bool, headroom: float) -> Observation:
    return Observation(load, passed, headroom, engine=_sample())


def test_one_trial_predicts_the_knee_of_its_engine() -> None:
    prediction = predict(SETTINGS, [_trial(5.0, True, 2.0)])
    assert prediction is not None
    knee = rate_at_gap(W, H, 2.0 * settled_gap(W, H, 5.0, TOKENS), TOKENS)
    assert prediction.load == pytest.approx(knee, rel=1e-3)
    assert prediction.low < prediction.load < prediction.high
    assert prediction.line.fixed == pytest.approx(W, rel=1e-6)


def test_no_prediction_for_a_concurrency_search_or_without_gaps() -> None:
    concurrency = SearchSettings(start=4.0, max_load=64.0, integer=True)
    assert predict(concurrency, [_trial(4.0, True, 2.0)]) is None
    assert predict(SETTINGS, [Observation(5.0, True, 2.0)]) is None


def test_a_pass_above_the_interval_contradicts_it_and_widens_the_report() -> None:
    first = predict(SETTINGS, [_trial(5.0, True, 2.0)])
    assert first is not None
    history = [_trial(5.0, True, 2.0), _trial(first.high * 1.2, True, 1.1)]
    against = contradictions(SETTINGS, history)
    assert [(c.trial, c.passed) for c in against] == [(2, True)]
    report = prediction_report(SETTINGS, history, lower_bound=first.high * 1.2)
    assert report is not None
    # The interval reported spans the load that contradicted it (widened, when the refit's did not).
    assert report["high"] >= first.high * 1.2
    assert report["widened"] is (report["high"] > predict(SETTINGS, history).high)  # type: ignore[union-attr]
    assert report["contradicted"][0]["expected"] == "fail"
    assert report["contradicted"][0]["measured"] == "pass"
    assert report["error"] == pytest.approx(report["load"] / (first.high * 1.2) - 1.0)


def test_a_failure_inside_the_interval_contradicts_nothing() -> None:
    first = predict(SETTINGS, [_trial(5.0, True, 2.0)])
    assert first is not None
    history = [_trial(5.0, True, 2.0), _trial(first.load, False, 0.98)]
    assert contradictions(SETTINGS, history) == []
    report = prediction_report(SETTINGS, history, lower_bound=5.0)
    assert report is not None and report["widened"] is False


def test_engine_sample_from_a_trials_figures() -> None:
    sample = _sample()
    figures = {"engine": {"decode": sample.decode.to_dict(), "output_tokens": TOKENS}}
    assert EngineSample.of(figures) == sample
    assert EngineSample.of({}) is None
    assert EngineSample.of({"engine": {"decode": sample.decode.to_dict(), "output_tokens": 0}}) is None


@pytest.mark.slow
async def test_on_the_simulator_the_prediction_lands_near_the_measured_answer() -> None:
    from exporter.jobs.capacity_loop import TrialAsk, search_capacity
    from exporter.jobs.trial_verdict import TrialReport

    bed = Bed("llama-3.1-8b-h100", "sharegpt", chunked=True)

    async def run_trial(ask: TrialAsk) -> TrialReport:
        return bed.trial(ask.load, ask.may_stop)

    result = await search_capacity(SearchSettings(start=2.0, max_load=1000.0), run_trial)
    assert result.converged and result.lower_bound is not None
    assert result.prediction is not None
    # Measured on this bed: the last prediction 1-3% from the lower bound; the model places trials,
    # so within the search's own tolerance and a half is what it must reach.
    assert abs(result.prediction["error"]) < 0.075
    line = result.prediction["decode_line"]
    assert line["fixed_s"] > 0.0 and line["per_running_s"] > 0.0


def test_placement_aims_below_the_knee_within_the_headrooms_growth() -> None:
    from exporter.jobs.capacity_search import AIM_BELOW, next_load

    placed = SearchSettings(start=5.0, max_load=100.0, predict=True)
    history = [_trial(10.0, True, 1.3)]
    knee = predict(placed, history)
    assert knee is not None
    below = knee.load / (1.0 + AIM_BELOW * placed.tolerance)
    assert below < 10.0 * placed.growth  # inside the headroom's growth here, so the knee decides
    assert next_load(placed, history) == pytest.approx(below)
    # Off (the default), the headroom alone places it: 2x past a pass of headroom 1.3.
    assert next_load(SETTINGS, history) == pytest.approx(20.0)
    # A knee past the headroom's growth (15 req/s from a pass at 5 with headroom 2) is held to it:
    # a decode model overshoots a prefill-bound knee.
    far = [_trial(5.0, True, 2.0)]
    assert predict(placed, far).load > 10.0  # type: ignore[union-attr]
    assert next_load(placed, far) == pytest.approx(10.0)
