"""Tests of exporter.stats.latency: per-request metrics, the vectorised batch and decode rates."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.stats.batch import IntervalBatch
from exporter.stats.latency import (
    LatencyBatch,
    RequestLatency,
    decode_rate_from_tbt,
    decode_rate_from_tpot,
    latency_batch,
    request_latency,
)

NAN = math.nan
FIELDS = ("ttft", "max_tbt", "tpot", "e2e", "normalized_latency", "output_tokens_per_s")


class Case(NamedTuple):
    """One request and its metrics worked out by hand."""

    intervals: list[float]
    e2e: float | None
    ttft: float
    max_tbt: float
    tpot: float
    total: float
    normalized: float
    tokens_per_s: float
    tokens: int


CASES = {
    "uniform gaps": Case([0.5, 0.1, 0.1, 0.1], None, 0.5, 0.1, 0.1, 0.8, 0.2, 5.0, 4),
    "single token": Case([0.3], None, 0.3, NAN, NAN, 0.3, 0.3, 1 / 0.3, 1),
    "empty request": Case([], None, NAN, NAN, NAN, NAN, NAN, NAN, 0),
    # Two chunks of three tokens after the first: each chunk is one gap then two zero gaps.
    "chunk bursts": Case([0.2, 0.3, 0.0, 0.0, 0.3, 0.0, 0.0], None, 0.2, 0.3, 0.1, 0.8, 0.8 / 7, 7 / 0.8, 7),
    "stream ends after last token": Case([0.5, 0.1, 0.1, 0.1], 1.0, 0.5, 0.1, 0.5 / 3, 1.0, 0.25, 4.0, 4),
    "all tokens at once": Case([0.0, 0.0], None, 0.0, 0.0, 0.0, 0.0, 0.0, NAN, 2),
    "unmeasured e2e is nan": Case([0.4, 0.2], NAN, 0.4, 0.2, 0.2, 0.6, 0.3, 2 / 0.6, 2),
    "empty request with e2e": Case([], 2.0, NAN, NAN, NAN, NAN, NAN, NAN, 0),
}


def _expected(case: Case) -> dict[str, float]:
    return {
        "ttft": case.ttft,
        "max_tbt": case.max_tbt,
        "tpot": case.tpot,
        "e2e": case.total,
        "normalized_latency": case.normalized,
        "output_tokens_per_s": case.tokens_per_s,
    }


def _same(got: float, expected: float) -> bool:
    if math.isnan(expected):
        return math.isnan(got)
    return got == pytest.approx(expected, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_request_latency_closed_form(case: Case) -> None:
    got = request_latency(case.intervals, e2e=case.e2e)
    assert isinstance(got, RequestLatency)
    for name, expected in _expected(case).items():
        assert _same(getattr(got, name), expected), name
    assert got.tokens == case.tokens
    assert list(got.tbt) == case.intervals[1:]


def test_latency_batch_closed_form_with_empty_requests_anywhere() -> None:
    cases = list(CASES.values())
    batch = IntervalBatch.from_sequences(c.intervals for c in cases)
    e2e = [NAN if c.e2e is None else c.e2e for c in cases]
    got = latency_batch(batch, e2e=e2e)
    assert isinstance(got, LatencyBatch)
    assert len(got) == len(cases)
    for i, case in enumerate(cases):
        for name, expected in _expected(case).items():
            assert _same(float(getattr(got, name)[i]), expected), (list(CASES)[i], name)
    assert list(got.tokens) == [c.tokens for c in cases]
    assert list(got.tbt) == [gap for c in cases for gap in c.intervals[1:]]


@pytest.mark.parametrize(
    "requests",
    [[], [[]], [[], [], []], [[0.1], [], [0.2, 0.3]]],
    ids=["none", "one empty", "all empty", "mixed"],
)
def test_latency_batch_shapes(requests: list[list[float]]) -> None:
    got = latency_batch(IntervalBatch.from_sequences(requests))
    sizes = {len(getattr(got, name)) for name in (*FIELDS, "tokens")}
    assert sizes == {len(requests)}
    assert len(got.tbt) == sum(max(len(r) - 1, 0) for r in requests)
    assert list(got.tokens) == [len(r) for r in requests]


def test_request_latency_rejects_e2e_before_last_token() -> None:
    with pytest.raises(
        ValueError, match=r"e2e is 0\.5 s but the intervals sum to 0\.8 s; e2e must be finite"
    ):
        request_latency([0.5, 0.3], e2e=0.5)


def test_request_latency_rejects_infinite_e2e() -> None:
    with pytest.raises(ValueError, match="e2e is inf s"):
        request_latency([0.5], e2e=math.inf)


def test_request_latency_tolerates_e2e_rounding_below_the_sum() -> None:
    intervals = [0.1, 0.2, 0.3]
    assert request_latency(intervals, e2e=0.6 * (1 - 1e-12)).e2e == pytest.approx(0.6)


def test_request_latency_rejects_bad_intervals() -> None:
    with pytest.raises(ValueError, match=r"interval 1 of request 0 is -0\.1"):
        request_latency([0.1, -0.1])


def test_latency_batch_names_the_request_with_a_bad_e2e() -> None:
    batch = IntervalBatch.from_sequences([[0.1], [0.2, 0.2]])
    with pytest.raises(ValueError, match=r"e2e of request 1 is 0\.3 s but its intervals sum to 0\.4 s"):
        latency_batch(batch, e2e=[0.1, 0.3])


def test_latency_batch_rejects_e2e_of_the_wrong_shape() -> None:
    batch = IntervalBatch.from_sequences([[0.1], [0.2]])
    with pytest.raises(ValueError, match=r"e2e has shape \(3,\); expected one value per request \(2,\)"):
        latency_batch(batch, e2e=[1.0, 1.0, 1.0])


@st.composite
def ragged_batches(draw: st.DrawFn) -> tuple[list[list[float]], list[float]]:
    gap = st.one_of(st.just(0.0), st.floats(0.0, 10.0))
    requests = draw(st.lists(st.lists(gap, max_size=8), max_size=12))
    extra = st.one_of(st.just(NAN), st.just(0.0), st.floats(0.0, 5.0))
    e2e = [math.fsum(r) + draw(extra) for r in requests]
    return requests, e2e


@given(ragged_batches(), st.booleans())
def test_latency_batch_agrees_with_request_latency(
    drawn: tuple[list[list[float]], list[float]], with_e2e: bool
) -> None:
    requests, e2e = drawn
    batch = latency_batch(IntervalBatch.from_sequences(requests), e2e=e2e if with_e2e else None)
    for i, intervals in enumerate(requests):
        one = request_latency(intervals, e2e=e2e[i] if with_e2e else None)
        for name in FIELDS:
            got, expected = float(getattr(batch, name)[i]), getattr(one, name)
            assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(
                expected, rel=1e-9, abs=1e-12
            ), (i, name)
        assert batch.tokens[i] == one.tokens
    assert list(batch.tbt) == [g for r in requests for g in r[1:]]


@given(st.lists(st.floats(0.0, 10.0), min_size=2, max_size=20))
def test_tpot_times_gaps_plus_ttft_is_e2e(intervals: list[float]) -> None:
    got = request_latency(intervals)
    assert got.ttft + got.tpot * (len(intervals) - 1) == pytest.approx(got.e2e, rel=1e-9, abs=1e-12)
    assert got.normalized_latency * got.tokens == pytest.approx(got.e2e, rel=1e-9, abs=1e-12)


def test_decode_rates_are_inverse_percentiles() -> None:
    assert decode_rate_from_tpot([0.1, 0.2, 0.4], 50.0) == pytest.approx(5.0)
    assert decode_rate_from_tpot([0.1, NAN, 0.3], 100.0) == pytest.approx(1 / 0.3)
    assert decode_rate_from_tbt([0.0, 0.1, 0.3], 50.0) == pytest.approx(10.0)


def test_tbt_rate_of_chunked_stream_is_unbounded() -> None:
    gaps = latency_batch(IntervalBatch.single([0.2, 0.3, 0.0, 0.0, 0.3, 0.0, 0.0])).tbt
    assert decode_rate_from_tbt(gaps, 50.0) == math.inf
    assert decode_rate_from_tbt(gaps, 99.0) == pytest.approx(1 / np.percentile(gaps, 99.0))


def test_decode_rate_of_nothing_is_nan() -> None:
    assert math.isnan(decode_rate_from_tpot([NAN], 99.0))
    assert math.isnan(decode_rate_from_tbt([], 99.0))


def test_decode_rate_rejects_bad_percentile() -> None:
    with pytest.raises(ValueError, match=r"percentile q must be in \[0, 100\], got 120"):
        decode_rate_from_tpot([0.1], 120.0)
