"""Tests of exporter.engine.derive: counter resets, histogram deltas, Prometheus' histogram_quantile and
what its buckets can tell of each answer (bucket_quantile)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.engine.catalogue import Signal
from exporter.engine.derive import (
    BucketQuantile,
    Resolution,
    bucket_quantile,
    client_minus_server_mean_ttft,
    client_minus_server_ttft,
    counter_increase,
    derive,
    histogram_delta,
    histogram_increase,
    histogram_quantile,
)
from exporter.engine.snapshot import EngineSnapshot, HistogramData

INF = math.inf
# 10 observations <= 0.1, 20 in (0.1, 0.5], 10 in (0.5, 1], 10 above 1.
BUCKETS = ((0.1, 10.0), (0.5, 30.0), (1.0, 40.0), (INF, 50.0))


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.0, 0.0),  # rank 0 in the first bucket: its lower end, 0
        (0.1, 0.05),  # rank 5 of 10 in [0, 0.1]
        (0.2, 0.1),  # rank 10: the top of the first bucket
        (0.5, 0.4),  # rank 25: 15 of 20 into (0.1, 0.5] -> 0.1 + 0.4 * 0.75
        (0.75, 0.875),  # rank 37.5: 7.5 of 10 into (0.5, 1] -> 0.5 + 0.5 * 0.75
        (0.8, 1.0),  # rank 40: the top of the last finite bucket
        (0.9, 1.0),  # rank 45 lies in +Inf: the highest finite bound
        (1.0, 1.0),
    ],
)
def test_histogram_quantile_hand_computed(q: float, expected: float) -> None:
    assert histogram_quantile(q, BUCKETS) == pytest.approx(expected, abs=1e-12)


def test_histogram_quantile_edge_cases_follow_prometheus() -> None:
    assert histogram_quantile(0.5, ((0.1, 0.0), (INF, 0.0))) is None  # no observations
    assert histogram_quantile(0.5, ((INF, 5.0),)) is None  # fewer than two buckets
    assert histogram_quantile(0.5, ((0.1, 1.0), (0.2, 2.0))) is None  # no +Inf bucket
    assert histogram_quantile(0.0, ((0.1, 0.0), (INF, 2.0))) is None  # 0/0 in Prometheus
    # A first bucket with a bound <= 0 answers that bound (SGLang's queue histogram starts at le=0).
    assert histogram_quantile(0.1, ((0.0, 5.0), (0.1, 15.0), (INF, 20.0))) == 0.0
    assert histogram_quantile(0.5, ((0.0, 5.0), (0.1, 15.0), (INF, 20.0))) == pytest.approx(0.05)
    # Unsorted input is sorted; counts that go down are raised to the running maximum.
    assert histogram_quantile(0.5, ((INF, 12.0), (0.5, 8.0), (0.1, 10.0))) == pytest.approx(0.06)
    with pytest.raises(ValueError, match=r"quantile must be within \[0, 1\], got 1.5"):
        histogram_quantile(1.5, BUCKETS)


# vLLM's request_queue_time_seconds buckets start at 0.3 s: 100 requests that each queued 0.6 ms.
VLLM_QUEUE = ((0.3, 100.0), (0.5, 100.0), (0.8, 100.0), (1.0, 100.0), (INF, 100.0))


@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_a_quantile_in_the_first_bucket_is_only_an_upper_bound(q: float) -> None:
    found = bucket_quantile(q, VLLM_QUEUE)
    assert found == BucketQuantile(pytest.approx(0.3 * q), 0.0, 0.3)  # Prometheus' 0.15 s, 0.27 s, 0.297 s
    assert found.resolution is Resolution.UPPER_BOUND
    assert found.measured is None and found.bound == 0.3


def test_a_quantile_in_the_inf_bucket_is_only_a_lower_bound() -> None:
    found = bucket_quantile(0.9, BUCKETS)  # rank 45 of 50, past the last finite bound, 1.0
    assert found == BucketQuantile(1.0, 1.0, INF)
    assert found.resolution is Resolution.LOWER_BOUND
    assert found.measured is None and found.bound == 1.0


def test_a_quantile_between_two_finite_bounds_is_measured() -> None:
    found = bucket_quantile(0.5, BUCKETS)  # rank 25: 15 of 20 into (0.1, 0.5]
    assert found == BucketQuantile(pytest.approx(0.4), 0.1, 0.5)
    assert found.resolution is Resolution.MEASURED and found.measured == pytest.approx(0.4)
    top = bucket_quantile(0.8, BUCKETS)  # rank 40: the top of the last finite bucket, still inside it
    assert top is not None and top.measured == 1.0


def test_a_bucket_that_starts_at_zero_gives_only_an_upper_bound() -> None:
    # SGLang's queue histogram starts at le=0: its first bucket is the bound itself, the next (0, 0.1].
    sglang = ((0.0, 5.0), (0.1, 15.0), (INF, 20.0))
    at_zero, above = bucket_quantile(0.1, sglang), bucket_quantile(0.5, sglang)
    assert at_zero == BucketQuantile(0.0, -INF, 0.0) and at_zero.resolution is Resolution.UPPER_BOUND
    assert above == BucketQuantile(pytest.approx(0.05), 0.0, 0.1) and above.bound == 0.1
    assert above.resolution is Resolution.UPPER_BOUND
    top = bucket_quantile(0.2, BUCKETS)  # rank 10: exactly the top of the first bucket
    assert top is not None and top.resolution is Resolution.UPPER_BOUND


def test_bucket_quantile_is_none_where_histogram_quantile_is() -> None:
    assert bucket_quantile(0.5, ((0.1, 0.0), (INF, 0.0))) is None  # no observations
    assert bucket_quantile(0.5, ((0.1, 1.0), (0.2, 2.0))) is None  # no +Inf bucket
    assert bucket_quantile(0.0, ((0.1, 0.0), (INF, 2.0))) is None  # 0/0 in Prometheus


@st.composite
def histograms(draw: st.DrawFn) -> tuple[tuple[float, float], ...]:
    bounds = sorted(draw(st.sets(st.floats(0.001, 1000.0), min_size=1, max_size=12)))
    increments = draw(st.lists(st.integers(0, 50), min_size=len(bounds) + 1, max_size=len(bounds) + 1))
    if sum(increments) == 0:
        increments[0] = 1
    counts, running = [], 0.0
    for increment in increments:
        running += increment
        counts.append(running)
    return tuple(zip([*bounds, INF], counts, strict=True))


@settings(max_examples=300, deadline=None)
@given(histograms(), st.floats(0.001, 1.0), st.floats(0.001, 1.0))
def test_histogram_quantile_is_monotone_in_q(
    buckets: tuple[tuple[float, float], ...], a: float, b: float
) -> None:
    low, high = sorted((a, b))
    x, y = histogram_quantile(low, buckets), histogram_quantile(high, buckets)
    assert x is not None and y is not None
    assert x <= y + 1e-9 * max(1.0, abs(y))


@settings(max_examples=300, deadline=None)
@given(histograms(), st.floats(0.001, 1.0))
def test_histogram_quantile_lies_in_the_bucket_holding_the_rank(
    buckets: tuple[tuple[float, float], ...], q: float
) -> None:
    value = histogram_quantile(q, buckets)
    assert value is not None
    rank = q * buckets[-1][1]
    index = next(i for i, (_, count) in enumerate(buckets) if count >= rank)
    if buckets[index][0] == INF:
        assert value == buckets[-2][0]
        return
    lower = buckets[index - 1][0] if index else 0.0
    tolerance = 1e-9 * max(1.0, buckets[index][0])
    assert lower - tolerance <= value <= buckets[index][0] + tolerance


@settings(max_examples=300, deadline=None)
@given(histograms(), st.floats(0.0, 1.0))
def test_bucket_quantile_is_histogram_quantile_with_its_bucket(
    buckets: tuple[tuple[float, float], ...], q: float
) -> None:
    found = bucket_quantile(q, buckets)
    assert (found.value if found else None) == histogram_quantile(q, buckets)
    if found is not None and found.measured is not None:
        assert 0.0 < found.lower <= found.value <= found.upper < INF
    if found is not None and found.measured is None:
        assert found.resolution is (Resolution.LOWER_BOUND if found.upper == INF else Resolution.UPPER_BOUND)


def test_counter_increase_handles_resets() -> None:
    assert counter_increase([10.0, 15.0, 15.0, 22.0]) == (12.0, 0)
    # 10 -> 15 (+5), restart, 3 counted from zero (+3), 3 -> 8 (+5)
    assert counter_increase([10.0, 15.0, 3.0, 8.0]) == (13.0, 1)
    assert counter_increase([5.0]) == (0.0, 0)


def hist(
    counts: tuple[float, ...], total: float, bounds: tuple[float, ...] = (0.1, 0.5, INF)
) -> HistogramData:
    return HistogramData(tuple(zip(bounds, counts, strict=True)), total, counts[-1])


def test_histogram_delta_and_resets() -> None:
    old, new = hist((1.0, 3.0, 4.0), 2.0), hist((2.0, 6.0, 8.0), 5.0)
    assert histogram_delta(old, new) == (hist((1.0, 3.0, 4.0), 3.0), False)
    assert histogram_delta(new, old) == (old, True)  # count went down: a restart
    assert histogram_delta(hist((1.0, 3.0, 4.0), 2.0), hist((0.0, 3.0, 4.0), 2.0))[1]  # a bucket went down
    other = hist((1.0, 1.0), 0.5, bounds=(1.0, INF))
    assert histogram_delta(old, other) == (other, True)  # new bounds: a restart with other buckets


def test_histogram_increase_over_a_restart() -> None:
    readings = [hist((1.0, 3.0, 4.0), 2.0), hist((2.0, 6.0, 8.0), 5.0), hist((1.0, 1.0, 2.0), 1.0)]
    total, resets = histogram_increase(readings)
    assert resets == 1
    assert total == hist((2.0, 4.0, 6.0), 4.0)  # (1, 3, 4) before the restart plus (1, 1, 2) after


def snapshot(at: float, prompt: float, ttft: HistogramData, waiting: float) -> EngineSnapshot:
    return EngineSnapshot(
        "vllm",
        at,
        {Signal.PROMPT_TOKENS_TOTAL: prompt, Signal.QUEUE_DEPTH: waiting},
        {Signal.SERVER_TTFT_SECONDS: ttft},
    )


def test_derive_rates_quantiles_and_means() -> None:
    first = snapshot(100.0, 1000.0, hist((0.0, 0.0, 0.0), 0.0), 2.0)
    middle = snapshot(110.0, 1500.0, hist((5.0, 10.0, 10.0), 2.0), 9.0)
    last = snapshot(120.0, 1600.0, hist((10.0, 30.0, 30.0), 7.0), 4.0)
    figures = derive([first, middle, last])
    assert figures.span_s == 20.0
    assert figures.increases == {Signal.PROMPT_TOKENS_TOTAL: 600.0}
    assert figures.rate(Signal.PROMPT_TOKENS_TOTAL) == 30.0
    assert figures.rate(Signal.GENERATION_TOKENS_TOTAL) is None
    # 30 observations: 10 in [0, 0.1], 20 in (0.1, 0.5]; p50 is rank 15: 5 of 20 into the second bucket.
    p50 = figures.quantile(Signal.SERVER_TTFT_SECONDS, 0.5)
    assert p50 is not None and p50.measured == pytest.approx(0.1 + 0.4 * 5 / 20)
    assert figures.mean(Signal.SERVER_TTFT_SECONDS) == pytest.approx(7.0 / 30)
    assert figures.quantile(Signal.SERVER_E2E_SECONDS, 0.5) is None
    assert figures.resets == 0


def test_derive_counts_a_counter_reset() -> None:
    empty = hist((0.0, 0.0, 0.0), 0.0)
    figures = derive([snapshot(0.0, 500.0, empty, 0.0), snapshot(10.0, 40.0, empty, 0.0)])
    assert figures.increases[Signal.PROMPT_TOKENS_TOTAL] == 40.0
    assert figures.resets == 1
    assert figures.quantile(Signal.SERVER_TTFT_SECONDS, 0.5) is None  # nothing observed in the window


def test_derive_rejects_bad_windows() -> None:
    empty = hist((0.0, 0.0, 0.0), 0.0)
    a, b = snapshot(0.0, 1.0, empty, 0.0), snapshot(1.0, 1.0, empty, 0.0)
    with pytest.raises(ValueError, match="at least two snapshots, got 1"):
        derive([a])
    with pytest.raises(ValueError, match="in time order"):
        derive([b, a])
    other = EngineSnapshot("sglang", 2.0)
    with pytest.raises(ValueError, match="different engines: sglang, vllm"):
        derive([a, b, other])


def test_client_minus_server_ttft() -> None:
    # Server: 5 observations in [0, 0.1], 15 in (0.1, 0.5]: p50 = rank 10 = 0.1 + 0.4 / 3; mean 4.0/20.
    server = hist((5.0, 20.0, 20.0), 4.0)
    client = [0.26, 0.28, 0.30, 0.32, 0.34]  # p50 0.30 (linear interpolation), mean 0.30
    assert client_minus_server_ttft(client, server, 0.5) == pytest.approx(0.30 - (0.1 + 0.4 / 3))
    assert client_minus_server_mean_ttft(client, server) == pytest.approx(0.10)
    assert client_minus_server_ttft([], server) is None
    assert client_minus_server_ttft(client, hist((0.0, 0.0, 0.0), 0.0)) is None
    assert client_minus_server_mean_ttft([math.nan], server) is None


def test_client_minus_server_ttft_is_none_against_a_server_bound() -> None:
    client = [0.12, 0.14, 0.16, 0.18, 0.20]
    # p50 rank 10 is the top of the first bucket, [0, 0.1]: the server's p50 is only "at most 0.1 s".
    first_bucket = hist((10.0, 20.0, 20.0), 0.6)
    assert client_minus_server_ttft(client, first_bucket, 0.5) is None
    # p99 rank 19.8 is past 0.5 s, in +Inf: only "above 0.5 s".
    inf_bucket = hist((2.0, 10.0, 20.0), 12.0)
    assert client_minus_server_ttft(client, inf_bucket, 0.99) is None
    # The difference of means needs no buckets: still there.
    assert client_minus_server_mean_ttft(client, first_bucket) == pytest.approx(0.16 - 0.03)
