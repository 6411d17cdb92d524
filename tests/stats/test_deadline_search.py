"""The minimum-deadline search must end, for every request, exactly where the reference bisection ends.

The reference is the per-request bisection over the per-token loop (``_min_deadline_by_loop``); for
thousands of requests its vectorised twin, the deadline sweep (itself tested equal to the loop), is
the oracle. Traces include stall-heavy ones, ragged lengths, chunk bursts and tokens placed exactly on
multiples of the deadline, where only the loop's own rounding decides.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.stats.accounting import FluidityOptions, Variant
from exporter.stats.batch import IntervalBatch
from exporter.stats.fluidity import fluid_token_rate
from exporter.stats.min_deadline import (
    Replays,
    _min_deadline_by_loop,
    _min_deadlines_by_sweep,
    last_before,
    min_deadlines_by_search,
    previous_minimum,
)
from tests.stats.strategies import traces

TARGETS = [0.5, 0.9, 0.99, 1.0]


def by_loop(requests: list[list[float]], target: float, variant: Variant) -> list[float]:
    options = FluidityOptions(ignore_first_token=True, variant=variant)
    return [_min_deadline_by_loop(r, target, options) for r in requests]


def by_sweep(batch: IntervalBatch, target: float, variant: Variant) -> list[float]:
    options = FluidityOptions(ignore_first_token=True, variant=variant)
    return _min_deadlines_by_sweep(batch, target, options).tolist()


def stall_trace(
    rng: np.random.Generator, requests: int, stall_share: float, *, ragged: bool = False
) -> IntervalBatch:
    """Lognormal 20 ms gaps, chunk bursts (zero gaps) and stalls of 0.1-1 s on ``stall_share`` of tokens."""
    lengths = rng.integers(1, 400, requests) if ragged else np.full(requests, 256)
    gaps = rng.lognormal(math.log(0.02), 0.35, int(lengths.sum()))
    gaps[rng.random(len(gaps)) < 0.05] = 0.0
    stalls = rng.random(len(gaps)) < stall_share
    gaps[stalls] = rng.uniform(0.1, 1.0, int(stalls.sum()))
    return IntervalBatch.from_flat(gaps, lengths)


# --- against the reference bisection -------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(traces(), st.sampled_from(TARGETS), st.sampled_from(["deadlines", "tokens"]))
def test_search_equals_the_loop_bisection(
    trace: tuple[list[list[float]], float, float], target: float, variant: Variant
) -> None:
    requests, _, _ = trace
    search = min_deadlines_by_search(IntervalBatch.from_sequences(requests), target, variant)
    assert search.minima.tolist() == by_loop(requests, target, variant)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([0.0, 0.01, 0.1, 0.3]),
    st.sampled_from(TARGETS),
    st.sampled_from(["deadlines", "tokens"]),
)
def test_stall_heavy_traces_equal_the_loop_bisection(
    seed: int, stall_share: float, target: float, variant: Variant
) -> None:
    rng = np.random.default_rng(seed)
    batch = stall_trace(rng, 12, stall_share, ragged=True)
    requests = [batch.request(i).tolist() for i in range(len(batch))]
    assert min_deadlines_by_search(batch, target, variant).minima.tolist() == by_loop(
        requests, target, variant
    )


@pytest.mark.parametrize("stall_share", [0.01, 0.05, 0.3])
@pytest.mark.parametrize("ragged", [False, True], ids=["equal", "ragged"])
def test_thousands_of_requests_equal_the_sweep(stall_share: float, ragged: bool) -> None:
    batch = stall_trace(np.random.default_rng(11), 1500, stall_share, ragged=ragged)
    search = min_deadlines_by_search(batch, 0.9, "deadlines")
    assert search.minima.tolist() == by_sweep(batch, 0.9, "deadlines")
    assert search.exact_verdicts == 0  # measured-like data never needs the exact engines
    assert search.frozen > len(batch) // 2  # and most requests end on the cheap frozen path


def test_tokens_variant_on_thousands_of_requests_equals_the_sweep() -> None:
    batch = stall_trace(np.random.default_rng(12), 800, 0.05, ragged=True)
    assert min_deadlines_by_search(batch, 0.9, "tokens").minima.tolist() == by_sweep(batch, 0.9, "tokens")


def test_streams_on_their_deadlines_go_through_the_exact_engines() -> None:
    # Every gap equal: at the answer every token sits exactly on its deadline, so many decisions are
    # critical at once and only the loop (or the sweep, for many requests) can give the verdict.
    uniform = [0.3] + [0.02] * 255
    thirds = [0.3] + [1 / 30] * 100
    on_the_line = [0.3] + [0.1] * 20 + [0.1 + 0.2] + [0.1] * 5
    requests = [uniform] * 40 + [thirds] * 40 + [on_the_line] * 3
    search = min_deadlines_by_search(IntervalBatch.from_sequences(requests), 0.9, "deadlines")
    assert search.exact_verdicts > 0
    assert search.minima.tolist() == by_loop(requests, 0.9, "deadlines")
    assert fluid_token_rate([uniform] * 100) == 50.0


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([1, 5, 20]), st.sampled_from(TARGETS))
def test_quantized_gaps_equal_the_sweep(seed: int, step_ms: int, target: float) -> None:
    # Gaps on a coarse grid tie with each other and sum exactly onto candidate deadlines, so freezing,
    # replays and the exact engines all meet in one search.
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, 300, 60)
    gaps = np.round(rng.lognormal(math.log(0.02), 0.5, int(lengths.sum())) * 1000 / step_ms) * step_ms / 1000
    stalls = rng.random(len(gaps)) < 0.03
    gaps[stalls] = rng.integers(1, 10, int(stalls.sum())) * 0.1
    batch = IntervalBatch.from_flat(gaps, lengths)
    for variant in ("deadlines", "tokens"):
        assert min_deadlines_by_search(batch, target, variant).minima.tolist() == by_sweep(
            batch, target, variant
        )


def test_overflowing_gap_sums_take_no_shortcut() -> None:
    requests = [[0.1, 1e308, 1e308, 0.5], [0.1, 1.7e308, 1.7e308, 1.0]]
    search = min_deadlines_by_search(IntervalBatch.from_sequences(requests), 0.5, "deadlines")
    assert search.minima.tolist() == by_loop(requests, 0.5, "deadlines")


def test_requests_without_decode_gaps_need_no_deadline() -> None:
    requests = [[0.5], [0.1, 0.0, 0.0], [], [0.2, 0.05]]
    search = min_deadlines_by_search(IntervalBatch.from_sequences(requests), 0.9, "deadlines")
    assert search.minima.tolist() == [0.0, 0.0, 0.0, 0.05]


def test_overflowing_miss_counts_fail_like_the_loop() -> None:
    # Deadlines near the smallest floats make a stall span more deadlines than a float can count.
    requests = [[0.1, 1e-300, 1.0, 1e-300], [0.1, 5e-324, 2.0]]
    search = min_deadlines_by_search(IntervalBatch.from_sequences(requests), 0.5, "deadlines")
    assert search.minima.tolist() == by_loop(requests, 0.5, "deadlines")


# --- the building blocks ---------------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.floats(-10, 10)), max_size=60))
def test_previous_minimum_and_last_flag_per_segment(items: list[tuple[int, float]]) -> None:
    items.sort(key=lambda item: item[0])
    segment = np.array([s for s, _ in items], dtype=np.int64)
    values = np.array([v for _, v in items])
    flags = values < 0
    minima, last = previous_minimum(values, segment), last_before(flags, segment)
    for i in range(len(items)):
        before = [j for j in range(i) if segment[j] == segment[i]]
        assert minima[i] == min((values[j] for j in before), default=math.inf)
        assert last[i] == max((j for j in before if flags[j]), default=-1)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 2.0), min_size=1, max_size=300), st.floats(1e-6, 1.0), st.data())
def test_replayed_slack_rounds_like_the_loop(gaps: list[float], deadline: float, data: st.DataObject) -> None:
    first = data.draw(st.integers(0, len(gaps)))
    stop = data.draw(st.integers(first, len(gaps)))
    slack = 0.0
    for gap in gaps[first:stop]:
        slack += deadline - gap
    replays = Replays(np.array(gaps))
    got = replays.slack(np.array([first, 0]), np.array([stop, len(gaps)]), np.array([deadline, deadline]))
    assert got[0] == slack
