"""Length distributions and their spec language: table-driven parsing, exact errors, properties."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.settings.lengths import (
    Bounds,
    Empirical,
    Fixed,
    LogNormal,
    Normal,
    Uniform,
    Zipf,
    parse_length_spec,
    read_numbers,
)

PARSED = [
    ("128", Fixed(128)),
    (128, Fixed(128)),
    ("fixed:64", Fixed(64)),
    ("fixed:value=64,max=32", Fixed(64, Bounds(1, 32))),
    ("uniform:low=10,high=20", Uniform(10, 20)),
    ("normal:mean=300,std=50,min=1,max=1024", Normal(300, 50, Bounds(1, 1024))),
    ("lognormal:median=200,sigma=0.8,min=1,max=4096", LogNormal(200, 0.8, Bounds(1, 4096))),
    (" LogNormal : median = 200 , sigma = 0.8 ", LogNormal(200, 0.8)),
    ("zipf:a=1.2,max=4096", Zipf(1.2, Bounds(1, 4096))),
    ("zipf:a=1.2", Zipf(1.2, Bounds(1, 131072))),
    ({"kind": "lognormal", "median": 200, "sigma": 0.8, "max": 4096}, LogNormal(200, 0.8, Bounds(1, 4096))),
    ({"kind": "empirical", "values": [3, 4, 5]}, Empirical((3, 4, 5), source="values=3")),
    ({"kind": "uniform", "low": "1", "high": 2.0}, Uniform(1, 2)),
]


@pytest.mark.parametrize(("spec", "expected"), PARSED)
def test_parse_length_spec(spec: Any, expected: object) -> None:
    assert parse_length_spec(spec) == expected


ERRORS = [
    (
        "lognorm:median=1",
        'unknown length distribution "lognorm"; valid: empirical, fixed, lognormal, normal, uniform, zipf',
    ),
    (  # the kind is named first: this once said 'fixd: expected field=value, got "512"'
        "fixd:512",
        'unknown length distribution "fixd"; valid: empirical, fixed, lognormal, normal, uniform, zipf',
    ),
    (
        {"median": 1},
        'unknown length distribution ""; valid: empirical, fixed, lognormal, normal, uniform, zipf',
    ),
    ("lognormal:mediam=200,sigma=1", 'lognormal: unknown field "mediam"; valid: max, median, min, sigma'),
    ("lognormal:median=200", 'lognormal: missing field "sigma"'),
    ("lognormal:median=abc,sigma=1", "lognormal: field \"median\" must be a number, got 'abc'"),
    ("lognormal:median=-5,sigma=1", 'lognormal: field "median" must be a number > 0, got -5.0'),
    ("lognormal:median=5,sigma=-1", 'lognormal: field "sigma" must be a number >= 0, got -1.0'),
    ("uniform:low=10,high=5", 'uniform: field "high" must be an integer >= low (10), got 5'),
    ("uniform:low=1.5,high=5", "uniform: field \"low\" must be an integer, got '1.5'"),
    ("normal:mean=1,std=1,min=10,max=5", 'normal: field "max" (5) must be >= "min" (10)'),
    ("zipf:a=0", 'zipf: field "a" must be a number > 0, got 0.0'),
    ("zipf:a=1,min=0", 'zipf: field "min" must be an integer >= 1, got 0'),
    ("fixed:value=-1", 'fixed: field "value" must be an integer >= 0, got -1'),
    ("normal:mean", 'normal: expected field=value, got "mean"'),
    ({"kind": "empirical"}, 'empirical: give exactly one of the fields "file" or "values"'),
    (
        {"kind": "empirical", "values": []},
        "empirical: field \"values\" must be a non-empty list of numbers, got '[]'",
    ),
    ({"kind": "empirical", "values": [1, "x"]}, "empirical: field \"values\" item 1: 'x' is not a number"),
    (True, "a length spec must be a string, an integer or a mapping, got True"),
]


@pytest.mark.parametrize(("spec", "message"), ERRORS)
def test_parse_errors_name_the_field_and_options(spec: Any, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_length_spec(spec)
    assert str(caught.value) == message


def test_empirical_from_file(tmp_path: Path) -> None:
    path = tmp_path / "lengths.txt"
    path.write_text("# prompt lengths\n10, 20 30\n40;50  # tail\n\n")
    dist = parse_length_spec(f"empirical:file={path}")
    assert read_numbers(path) == (10, 20, 30, 40, 50)
    values = dist.sample(1000, np.random.default_rng(0))
    assert set(values.tolist()) == {10, 20, 30, 40, 50}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1\n2 x\n", "{path}:2: 'x' is not a number"),
        ("1\n-3\n", "{path}:2: '-3' is not a token count (a finite number >= 0)"),
        ("# none\n", "lengths file {path} holds no numbers"),
    ],
)
def test_empirical_file_errors(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(ValueError) as caught:
        read_numbers(path)
    assert str(caught.value) == message.format(path=path)


def test_empirical_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"cannot read lengths file .*nope.txt"):
        parse_length_spec({"kind": "empirical", "file": str(tmp_path / "nope.txt")})


# --- properties ----------------------------------------------------------------------------------

bounds = st.tuples(st.integers(1, 50), st.one_of(st.none(), st.integers(50, 5000))).map(lambda b: Bounds(*b))
distributions = st.one_of(
    bounds.flatmap(lambda b: st.builds(Fixed, st.integers(b.low, 10_000), st.just(b))),
    st.builds(
        lambda lo, width, b: Uniform(lo, max(lo + width, b.low), b),
        st.integers(0, 1000),
        st.integers(0, 1000),
        bounds,
    ),
    st.builds(Normal, st.integers(-100, 3000).map(float), st.integers(0, 500).map(float), bounds),
    st.builds(LogNormal, st.integers(1, 5000).map(float), st.integers(0, 200).map(lambda s: s / 100), bounds),
    st.builds(lambda a, hi: Zipf(a / 10, Bounds(1, hi)), st.integers(1, 30), st.integers(1, 5000)),
)


@settings(max_examples=150, deadline=None)
@given(distributions, st.integers(0, 2**32 - 1))
def test_samples_are_whole_tokens_within_bounds_and_seeded(dist: Any, seed: int) -> None:
    first = dist.sample(200, np.random.default_rng(seed))
    again = dist.sample(200, np.random.default_rng(seed))
    assert first.dtype == np.int64 and len(first) == 200
    assert np.array_equal(first, again)
    low, high = dist.bounds.low, dist.bounds.high
    assert first.min() >= low
    assert high is None or first.max() <= high


@settings(max_examples=150, deadline=None)
@given(distributions)
def test_describe_round_trips_through_the_parser(dist: Any) -> None:
    assert parse_length_spec(dist.describe()) == dist


# --- shapes --------------------------------------------------------------------------------------


def test_lognormal_median_and_spread() -> None:
    values = LogNormal(200, 0.8).sample(20_000, np.random.default_rng(1))
    assert np.median(values) == pytest.approx(200, rel=0.03)
    assert np.std(np.log(values)) == pytest.approx(0.8, rel=0.03)


def test_normal_mean_and_std_before_clipping_bites() -> None:
    values = Normal(1000, 100).sample(20_000, np.random.default_rng(2))
    assert values.mean() == pytest.approx(1000, rel=0.01)
    assert values.std() == pytest.approx(100, rel=0.03)


def test_uniform_covers_both_ends() -> None:
    values = Uniform(5, 9).sample(5000, np.random.default_rng(3))
    assert set(values.tolist()) == {5, 6, 7, 8, 9}


def test_zipf_is_truncated_not_clipped() -> None:
    values = Zipf(1.1, Bounds(1, 100)).sample(50_000, np.random.default_rng(4))
    counts = np.bincount(values, minlength=101)[1:]
    # P(k) ∝ k^-a: frequencies fall with k, and the max gets no pile-up from a clipped tail.
    assert counts[0] > counts[1] > counts[9] > counts[99] > 0
    expected_ratio = (100 / 99) ** 1.1
    assert counts[98] / counts[99] == pytest.approx(expected_ratio, rel=0.35)


def test_zipf_with_a_steep_exponent_is_still_zipf() -> None:
    # k**-a underflowed to 0 for every k (a=2000 from 1000): the sum was 0, the CDF NaN, and every draw
    # the minimum. P(1000) / P(1001) = (1001 / 1000)**2000 = e**2 nearly.
    values = Zipf(2000, Bounds(1000, 2000)).sample(40_000, np.random.default_rng(4))
    counts = np.bincount(values - 1000)
    assert counts[0] / counts[1] == pytest.approx((1001 / 1000) ** 2000, rel=0.1)


@pytest.mark.parametrize(
    "spec",
    [
        "fixed:1e30",
        "normal:mean=1e19,std=0",
        "lognormal:median=1e300,sigma=0",
        "empirical:values=1e30",
        "uniform:low=0,high=1e30",
    ],
)
def test_draws_far_past_any_ceiling_stay_far_past_it(spec: str) -> None:
    """They overflowed int64 (negative lengths that passed every ceiling) or raised in numpy."""
    values = parse_length_spec(spec).sample(100, np.random.default_rng(0))
    assert (values > 2**40).all(), values


def test_clipping_rounds_then_clips() -> None:
    assert Normal(0, 0, Bounds(1, None)).sample(3, np.random.default_rng(0)).tolist() == [1, 1, 1]
    assert Fixed(10, Bounds(1, 4)).sample(2, np.random.default_rng(0)).tolist() == [4, 4]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("fixed:0", 'fixed: field "value" (0) is below "min" (1): every length would be clipped to 1'),
        ("uniform:low=0,high=0", 'uniform: field "high" (0) is below "min" (1)'),
        ("fixed:value=3,min=5", 'fixed: field "value" (3) is below "min" (5)'),
    ],
)
def test_lengths_wholly_below_their_min_are_refused(spec: str, message: str) -> None:
    """``fixed:0`` once sent 15-token prompts without a word: clipped to the default min of 1, then
    to the prompt builder's floor."""
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_length_spec(spec)
    assert parse_length_spec("fixed:value=0,min=0").sample(2, np.random.default_rng(0)).tolist() == [0, 0]
