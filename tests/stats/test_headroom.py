"""Deadline headroom and the early-stopping rules: the per-request loop at scaled deadlines is the reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.stats.accounting import FluidityOptions
from exporter.stats.batch import IntervalBatch
from exporter.stats.fluidity_engines import loop_request
from exporter.stats.headroom import (
    MAX_SCALE,
    MIN_SCALE,
    SCALE_STEPS,
    allowed_failures,
    deadline_headroom,
    decided_failure,
    give_up_wait,
    required_scales,
)

OPTIONS = FluidityOptions()
# One bisection step in log2(scale): the result passes, one step below it fails.
STEP = math.log2(MAX_SCALE / MIN_SCALE) / 2**SCALE_STEPS


def loop_passes(intervals: list[float], dp: float, dd: float, scale: float, target: float) -> bool:
    return loop_request(intervals, dp * scale, dd * scale, OPTIONS).fluidity >= target


def reference_scale(intervals: list[float], dp: float, dd: float, target: float) -> float:
    """The same bisection on log2(scale), one request at a time through the literal loop."""
    low, high = math.log2(MIN_SCALE), math.log2(MAX_SCALE)

    def passes(log_scale: float) -> bool:
        return loop_passes(intervals, dp, dd, float(np.exp2(log_scale)), target)

    if passes(low):
        return MIN_SCALE
    if not passes(high):
        return math.inf
    for _ in range(SCALE_STEPS):
        middle = (low + high) / 2.0
        low, high = (low, middle) if passes(middle) else (middle, high)
    return float(np.exp2(high))


def request_strategy() -> st.SearchStrategy[list[float]]:
    gap = st.one_of(
        st.floats(0.0, 0.2),  # ordinary decode gaps around Dd
        st.floats(0.2, 5.0),  # stalls
        st.just(0.0),  # several tokens in one chunk
    )
    return st.lists(gap, min_size=1, max_size=60)


@settings(max_examples=150, deadline=None)
@given(
    requests=st.lists(request_strategy(), min_size=1, max_size=8),
    dp=st.floats(0.05, 3.0),
    dd=st.floats(0.005, 0.2),
    target=st.sampled_from([0.5, 0.8, 0.9, 0.99, 1.0]),
)
def test_required_scales_match_the_per_request_loop(
    requests: list[list[float]], dp: float, dd: float, target: float
) -> None:
    prefill = np.full(len(requests), dp)
    got = required_scales(IntervalBatch.from_sequences(requests), prefill, dd, target)
    for intervals, scale in zip(requests, got.tolist(), strict=True):
        assert scale == reference_scale(intervals, dp, dd, target)
        if MIN_SCALE < scale < math.inf:
            # What the factor means, checked with the loop itself: the request reaches the target at
            # ``scale`` times the deadlines and misses it one bisection step below.
            assert loop_passes(intervals, dp, dd, scale, target)
            assert not loop_passes(intervals, dp, dd, scale * 2 ** (-STEP) * (1 - 1e-12), target)


def test_required_scales_ends_and_per_request_prefill_deadlines() -> None:
    requests = [
        [0.001, 0.0001, 0.0001],  # far inside its deadlines: clipped to the smallest factor
        [1000.0, 0.01],  # a 1000 s first token misses even 64x a 0.5 s deadline
        [0.5, 0.05, 0.05],  # exactly on its deadlines: factor 1
        [1.0, 0.05, 0.05],  # twice its 0.5 s prefill deadline
    ]
    scales = required_scales(IntervalBatch.from_sequences(requests), np.full(4, 0.5), 0.05, 1.0)
    assert scales[0] == MIN_SCALE
    assert scales[1] == math.inf
    assert scales[2] == pytest.approx(1.0, rel=2 * STEP)
    assert scales[3] == pytest.approx(2.0, rel=2 * STEP)
    # The prefill deadline is per request: the same intervals with a 1 s deadline need half the factor.
    own = required_scales(IntervalBatch.from_sequences([[1.0, 0.05]] * 2), np.array([0.5, 1.0]), 0.05, 1.0)
    assert own[0] == pytest.approx(2.0, rel=2 * STEP)
    assert own[1] == pytest.approx(1.0, rel=2 * STEP)


def test_required_scales_rejects_mismatched_deadlines_and_accepts_no_requests() -> None:
    batch = IntervalBatch.from_sequences([[0.1], [0.2]])
    with pytest.raises(ValueError, match="3 prefill deadlines for 2 requests"):
        required_scales(batch, np.ones(3), 0.05, 0.9)
    assert len(required_scales(IntervalBatch.from_sequences([]), np.zeros(0), 0.05, 0.9)) == 0


@settings(max_examples=200, deadline=None)
@given(
    scales=st.lists(st.one_of(st.floats(MIN_SCALE, MAX_SCALE), st.just(math.inf)), min_size=1, max_size=300),
    percentile=st.sampled_from([50.0, 90.0, 99.0, 99.9, 100.0]),
)
def test_deadline_headroom_is_the_nearest_rank_factor(scales: list[float], percentile: float) -> None:
    ordered = sorted(scales)
    needed = ordered[math.ceil(round(percentile / 100.0 * len(scales), 9)) - 1]
    expected = 0.0 if math.isinf(needed) else 1.0 / needed
    assert deadline_headroom(np.array(scales), percentile) == expected


@pytest.mark.parametrize(
    ("count", "failed", "headroom"),
    [
        (100, 0, 1.0),
        (100, 1, 1.0),  # p99 of 100: one request may fail outright
        (100, 2, 0.0),
        (200, 2, 1.0),
        (200, 3, 0.0),
        (99, 1, 0.0),  # p99 of 99: all 99 must meet it
    ],
)
def test_failed_requests_count_as_infinite_factors(count: int, failed: int, headroom: float) -> None:
    scales = np.concatenate([np.ones(count - failed), np.full(failed, math.inf)])
    assert deadline_headroom(scales, 99.0) == headroom


def test_deadline_headroom_of_nothing_is_nan() -> None:
    assert math.isnan(deadline_headroom(np.zeros(0), 99.0))


@pytest.mark.parametrize(
    ("requests", "p99", "p90"),
    [(0, 0, 0), (1, 0, 0), (99, 0, 9), (100, 1, 10), (200, 2, 20)],
)
def test_allowed_failures(requests: int, p99: int, p90: int) -> None:
    assert allowed_failures(requests, 99.0) == p99
    assert allowed_failures(requests, 90.0) == p90


@pytest.mark.parametrize(
    ("failures", "planned", "percentile", "decided"),
    [
        (0, 0, 99.0, False),
        (1, 0, 99.0, True),  # nothing may fail in an empty trial
        (1, 1, 99.0, True),
        (1, 99, 99.0, True),
        (1, 100, 99.0, False),
        (2, 100, 99.0, True),
        (2, 200, 99.0, False),
        (3, 200, 99.0, True),
        (9, 99, 90.0, False),
        (10, 99, 90.0, True),
        (10, 100, 90.0, False),
        (11, 100, 90.0, True),
        (20, 200, 90.0, False),
        (21, 200, 90.0, True),
    ],
)
def test_decided_failure(failures: int, planned: int, percentile: float, decided: bool) -> None:
    assert decided_failure(failures, planned, percentile) is decided


@settings(max_examples=200, deadline=None)
@given(planned=st.integers(1, 1000), percentile=st.sampled_from([50.0, 90.0, 95.0, 99.0, 99.9]))
def test_decided_failure_agrees_with_the_headroom_verdict(planned: int, percentile: float) -> None:
    """A trial whose failures are decided cannot pass however the rest go; one that is not can."""
    for failures in range(planned + 1):
        best_case = np.concatenate([np.ones(planned - failures), np.full(failures, math.inf)])
        passes = deadline_headroom(best_case, percentile) >= 1.0
        assert decided_failure(failures, planned, percentile) is not passes


@settings(max_examples=300, deadline=None)
@given(
    dp=st.floats(0.05, 5.0),
    dd=st.floats(0.005, 0.2),
    tokens=st.integers(1, 2000),
    target=st.sampled_from([0.5, 0.8, 0.9, 0.95, 0.99, 1.0]),
    pace=st.floats(0.0, 1.0),
)
def test_give_up_wait_against_the_loop(dp: float, dd: float, tokens: int, target: float, pace: float) -> None:
    """A first token just after the give-up wait fails even if every later token is on time; just before
    it, on-time tokens reach the target."""
    wait = give_up_wait(dp, dd, tokens, target)
    assert wait >= dp
    later = [pace * dd] * (tokens - 1)
    assert loop_request([wait * (1 + 1e-9), *later], dp, dd, OPTIONS).fluidity < target
    assert loop_request([wait * (1 - 1e-9), *later], dp, dd, OPTIONS).fluidity >= target


@pytest.mark.parametrize(
    ("tokens", "target", "missed_deadlines"),
    [
        (1, 0.9, 1),  # a lone token must be on time
        (10, 0.9, 2),  # 1 miss in 10 deadlines is exactly 0.9: the first token may miss one
        (11, 0.9, 2),
        (101, 0.9, 12),  # 11 misses + 100 on time = 0.9009; 12 = 0.8929
        (100, 1.0, 1),
    ],
)
def test_give_up_wait_allows_whole_missed_deadlines(
    tokens: int, target: float, missed_deadlines: int
) -> None:
    # The wait reaches the deadline that would be one miss too many.
    assert give_up_wait(0.5, 0.05, tokens, target) == pytest.approx(0.5 + (missed_deadlines - 1) * 0.05)


def test_give_up_wait_scales_with_the_deadlines() -> None:
    for scale in (0.5, 2.0, 7.0):
        assert give_up_wait(0.5 * scale, 0.05 * scale, 300, 0.9) == pytest.approx(
            scale * give_up_wait(0.5, 0.05, 300, 0.9)
        )
