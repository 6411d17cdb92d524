"""Tests of exporter.stats.engine_model: the decode line recovered from a simulated continuous-batching
engine's token stamps, Little's law, and the knee predicted from calibrated headrooms."""

from __future__ import annotations

import math

import numpy as np
import pytest

from exporter.stats.engine_model import (
    DecodeBins,
    DecodeLine,
    TrialPoint,
    decode_bins,
    decoding,
    fit_decode_line,
    pooled,
    predict_knee,
    rate_at_gap,
    settled_gap,
)

W, H = 0.008, 0.0004  # seconds: a step's fixed cost and its cost per running request


def _engine(
    rate: float, requests: int, tokens: int, prefill: float = 0.0, seed: int = 0, jitter: float = 0.0
) -> list[list[float]]:
    """Token stamps of a continuous-batching engine: each step costs ``W + H n`` for ``n`` running
    requests (times ``1 + jitter * N(0, 1)``) and gives each one token; a request that arrived joins at
    the next step, whose cost includes its ``prefill`` (it gets its first token at that step's end)."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, requests)).tolist()
    stamps: list[list[float]] = [[] for _ in range(requests)]
    running: list[int] = []
    now, waiting = 0.0, 0
    while waiting < requests or running:
        joining = []
        while waiting < requests and arrivals[waiting] <= now:
            joining.append(waiting)
            waiting += 1
        if not running and not joining:
            now = arrivals[waiting]
            continue
        step = (W + H * len(running)) * (1.0 + jitter * float(rng.standard_normal()))
        now += step + prefill * len(joining)
        for index in running + joining:
            stamps[index].append(now)
        running = [i for i in running + joining if len(stamps[i]) < tokens]
    return stamps


def _bins(stamps: list[list[float]]) -> DecodeBins:
    return decode_bins([(times, [1] * len(times)) for times in stamps])


def test_the_line_is_recovered_from_a_simulated_engines_gaps() -> None:
    line = fit_decode_line(_bins(_engine(rate=20.0, requests=300, tokens=100)))
    assert line is not None
    assert line.fixed == pytest.approx(W, rel=0.02)
    assert line.per_running == pytest.approx(H, rel=0.02)
    assert line.r_squared > 0.95


def test_gaps_that_waited_on_a_prefill_are_left_out() -> None:
    # A 30 ms prefill in every step a request joins: about one step in six here. Kept in, those gaps
    # would lift the line's fixed part by a sixth of 30 ms.
    line = fit_decode_line(_bins(_engine(rate=20.0, requests=300, tokens=100, prefill=0.03)))
    assert line is not None
    assert line.fixed == pytest.approx(W, rel=0.05)
    assert line.per_running == pytest.approx(H, rel=0.05)


def test_the_covariance_shrinks_with_more_gaps_and_covers_the_truth() -> None:
    small = fit_decode_line(_bins(_engine(rate=20.0, requests=60, tokens=50, seed=3, jitter=0.2)))
    large = fit_decode_line(_bins(_engine(rate=20.0, requests=400, tokens=50, seed=3, jitter=0.2)))
    assert small is not None and large is not None
    assert large.covariance[1][1] < small.covariance[1][1]
    assert 0.0 < abs(large.per_running - H) < 4.0 * math.sqrt(large.covariance[1][1])


def test_too_few_gaps_or_one_running_count_fit_nothing() -> None:
    assert fit_decode_line(DecodeBins((3,), (500,), (5.0,), (0.06,))) is None
    assert fit_decode_line(DecodeBins((1, 2), (10, 10), (0.1, 0.2), (0.001, 0.004))) is None


def test_decoding_counts_streams_between_first_token_and_end() -> None:
    firsts, ends = np.array([0.0, 1.0, 2.0]), np.array([3.0, 1.5, 4.0])
    assert decoding(firsts, ends, np.array([0.5, 1.2, 2.5, 3.5, 5.0])).tolist() == [1, 2, 2, 1, 0]


def test_an_event_of_several_tokens_is_as_many_gaps() -> None:
    bins = decode_bins([([0.0, 0.1, 0.4], [1, 1, 3])])
    assert bins.gaps == 4
    assert sum(bins.total) == pytest.approx(0.4)


def test_bins_pool_and_round_trip() -> None:
    a, b = _bins(_engine(20.0, 50, 20, seed=1)), _bins(_engine(20.0, 50, 20, seed=2))
    both = pooled([a, b])
    assert both.gaps == a.gaps + b.gaps
    assert sum(both.total) == pytest.approx(sum(a.total) + sum(b.total))
    assert DecodeBins.of(both.to_dict()) == both
    assert DecodeBins.of({"running": [1], "count": []}) is None
    assert DecodeBins.of("bins") is None


def test_littles_law_gap_and_its_inverse() -> None:
    # 10 req/s of 100 tokens at 0.4 ms per running request: 40% of the way to saturation.
    gap = settled_gap(W, H, 10.0, 100.0)
    assert gap == pytest.approx(W / 0.6)
    assert rate_at_gap(W, H, gap, 100.0) == pytest.approx(10.0)
    assert settled_gap(W, H, 25.0, 100.0) == math.inf


def _line() -> DecodeLine:
    return DecodeLine(W, H, ((1e-10, 0.0), (0.0, 1e-14)), 0.99, 10_000)


def test_one_trial_predicts_where_the_gap_grows_by_its_headroom() -> None:
    # At 5 req/s the gap is W / 0.8; a headroom of 2 puts the knee where the gap is twice that.
    prediction = predict_knee(_line(), [TrialPoint(5.0, 2.0, 100.0)])
    assert prediction is not None
    knee = rate_at_gap(W, H, 2.0 * settled_gap(W, H, 5.0, 100.0), 100.0)
    assert prediction.load == pytest.approx(knee, rel=1e-9)
    assert prediction.low <= prediction.load <= prediction.high < prediction.saturation
    assert prediction.saturation == pytest.approx(25.0)


def test_trials_at_two_loads_fit_the_calibrations_slope() -> None:
    # Headroom (g* / g)^2 with g* the gap at 20 req/s: two trials recover b = 2 and the knee at 20.
    target = settled_gap(W, H, 20.0, 100.0)
    points = [TrialPoint(r, (target / settled_gap(W, H, r, 100.0)) ** 2, 100.0) for r in (4.0, 12.0)]
    prediction = predict_knee(_line(), points)
    assert prediction is not None
    assert prediction.slope == pytest.approx(2.0, rel=1e-6)
    assert prediction.load == pytest.approx(20.0, rel=1e-6)


def test_no_prediction_without_a_rising_line_or_a_headroom() -> None:
    flat = DecodeLine(W, 0.0, ((1e-10, 0.0), (0.0, 1e-14)), 0.0, 10_000)
    assert predict_knee(flat, [TrialPoint(5.0, 2.0, 100.0)]) is None
    assert predict_knee(_line(), [TrialPoint(5.0, math.nan, 100.0)]) is None
    # A headroom below the engine's idle gap's share: no load passes, nothing to predict.
    assert predict_knee(_line(), [TrialPoint(5.0, 0.5, 100.0)]) is None
