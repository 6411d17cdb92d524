"""Tests of exporter.stats.distribution: describe, interpolated percentiles and nearest-rank bounds."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.stats.distribution import (
    Distribution,
    describe,
    nearest_rank,
    nearest_rank_index,
    percentile,
    without_nan,
)

NAN = math.nan
ONE_TO_HUNDRED = [float(i) for i in range(1, 101)]


def test_describe_one_to_hundred_matches_closed_form() -> None:
    d = describe(ONE_TO_HUNDRED)
    assert (d.count, d.mean, d.min, d.max) == (100, 50.5, 1.0, 100.0)
    # Linear interpolation at rank q/100 * (n - 1): p50 = 50.5, p90 = 90.1, p99 = 99.01.
    assert d.p50 == pytest.approx(50.5)
    assert d.p90 == pytest.approx(90.1)
    assert d.p95 == pytest.approx(95.05)
    assert d.p99 == pytest.approx(99.01)


def test_describe_ignores_nan() -> None:
    d = describe([1.0, NAN, 3.0])
    assert (d.count, d.mean, d.min, d.max, d.p50) == (2, 2.0, 1.0, 3.0, 2.0)


@pytest.mark.parametrize("values", [[], [NAN, NAN]], ids=["empty", "all-nan"])
def test_describe_without_values_is_all_nan(values: list[float]) -> None:
    d = describe(values)
    assert d.count == 0
    assert all(math.isnan(v) for v in (d.mean, d.min, d.max, d.p50, d.p90, d.p95, d.p99))


def test_to_dict_is_strict_json_with_nan_as_none() -> None:
    empty = describe([]).to_dict()
    assert empty == dict.fromkeys(["mean", "min", "max", "p50", "p90", "p95", "p99"], None) | {"count": 0}
    assert json.loads(json.dumps(describe([2.0]).to_dict(), allow_nan=False))["p99"] == 2.0


def test_distribution_is_frozen() -> None:
    d = describe([1.0])
    assert isinstance(d, Distribution)
    with pytest.raises(AttributeError):
        d.count = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([0.0, 10.0], 25.0, 2.5),
        ([0.0, 10.0], 0.0, 0.0),
        ([0.0, 10.0], 100.0, 10.0),
        ([5.0, NAN, 1.0, 3.0], 50.0, 3.0),
        ([7.0], 99.0, 7.0),
    ],
)
def test_percentile_interpolates_linearly(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_nan() -> None:
    assert math.isnan(percentile([NAN], 50.0))


@pytest.mark.parametrize("q", [-1.0, 100.5, NAN])
def test_percentile_rejects_q_outside_0_100(q: float) -> None:
    with pytest.raises(ValueError, match=r"percentile q must be in \[0, 100\], got"):
        percentile([1.0], q)


@pytest.mark.parametrize(
    ("values", "fraction", "largest", "expected"),
    [
        (ONE_TO_HUNDRED, 0.99, False, 99.0),  # 0.99 * 100 must give rank 99, not 100
        (ONE_TO_HUNDRED, 0.07, False, 7.0),  # 0.07 * 100 is 7.000000000000001 in floats
        (ONE_TO_HUNDRED, 99.9 / 100, False, 100.0),
        (ONE_TO_HUNDRED, 1.0, False, 100.0),
        (ONE_TO_HUNDRED, 0.01, False, 1.0),
        (ONE_TO_HUNDRED, 0.99, True, 2.0),  # at least 99 of 100 values are >= 2
        (ONE_TO_HUNDRED, 1.0, True, 1.0),
        ([4.0, 1.0, 3.0, 2.0], 0.5, False, 2.0),
        ([4.0, 1.0, 3.0, 2.0], 0.5, True, 3.0),
        ([4.0, 1.0, 3.0, 2.0], 0.51, False, 3.0),
        ([1.0, NAN, 2.0], 1.0, False, 2.0),
        ([2.0, 2.0, 2.0, 9.0], 0.75, False, 2.0),
    ],
)
def test_nearest_rank_table(values: list[float], fraction: float, largest: bool, expected: float) -> None:
    assert nearest_rank(values, fraction, largest=largest) == expected


def test_nearest_rank_index_of_integer_percentiles_is_exact() -> None:
    for p in range(1, 101):
        got = [nearest_rank_index(n, p / 100) for n in range(1, 101)]
        assert got == [-(-p * n // 100) for n in range(1, 101)], p  # exact integer ceiling


def test_nearest_rank_index_of_two_decimal_percentiles_is_exact() -> None:
    # Percentiles such as 99.95 written as P / 100, on sample sizes up to 1000.
    counts = range(1, 1001, 37)
    for hundredths in range(1, 10001, 13):
        got = [nearest_rank_index(n, (hundredths / 100) / 100) for n in counts]
        assert got == [-(-hundredths * n // 10000) for n in counts], hundredths


def test_nearest_rank_of_nothing_is_nan() -> None:
    assert math.isnan(nearest_rank([], 0.5))
    assert math.isnan(nearest_rank([NAN], 0.5, largest=True))


@pytest.mark.parametrize("fraction", [0.0, -0.1, 1.5, NAN])
def test_nearest_rank_rejects_fraction_outside_unit_interval(fraction: float) -> None:
    with pytest.raises(ValueError, match=r"nearest-rank fraction must be in \(0, 1\], got"):
        nearest_rank([1.0], fraction)


def test_without_nan_drops_only_nan() -> None:
    assert list(without_nan([[1.0, NAN], [math.inf, 2.0]])) == [1.0, math.inf, 2.0]


samples = st.lists(
    st.one_of(st.floats(-1e6, 1e6, allow_nan=False), st.just(NAN), st.sampled_from([0.0, 1.0, 2.0])),
    max_size=40,
)


@st.composite
def decimal_fractions(draw: st.DrawFn) -> Fraction:
    denominator = draw(st.sampled_from([1, 2, 3, 4, 10, 100, 1000, 10000, 7]))
    return Fraction(draw(st.integers(1, denominator)), denominator)


def _brute_force(values: list[float], fraction: Fraction, largest: bool) -> float:
    data = [v for v in values if not math.isnan(v)]
    if largest:
        meeting = [v for v in data if sum(w >= v for w in data) >= fraction * len(data)]
        return max(meeting, default=NAN)
    meeting = [v for v in data if sum(w <= v for w in data) >= fraction * len(data)]
    return min(meeting, default=NAN)


@given(samples, decimal_fractions(), st.booleans())
def test_nearest_rank_matches_brute_force_definition(
    values: list[float], fraction: Fraction, largest: bool
) -> None:
    got = nearest_rank(values, float(fraction), largest=largest)
    expected = _brute_force(values, fraction, largest)
    assert got == expected or (math.isnan(got) and math.isnan(expected))


@given(st.lists(st.floats(0, 1e3), min_size=1, max_size=40), st.floats(0, 100))
def test_percentile_lies_between_min_and_max(values: list[float], q: float) -> None:
    assert min(values) <= percentile(values, q) <= max(values)
