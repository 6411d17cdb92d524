"""Tests of exporter.stats.objectives: SLO parsing and evaluation, goodput and the decode tiers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import ArrayLike

from exporter.stats.objectives import (
    DECODE_TIERS,
    Goodput,
    GoodputBounds,
    Objective,
    ObjectiveResult,
    SloMetric,
    decode_tier,
    evaluate_objective,
    evaluate_objectives,
    goodput,
    parse_objective,
)

NAN = math.nan
HUNDREDTHS = [i / 100 for i in range(1, 101)]  # 0.01 .. 1.00
VALID = "valid: e2e, fluidity, normalized_latency, tbt, tpot, ttft"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ttft:p99<=0.5", Objective(SloMetric.TTFT, 99.0, 0.5)),
        ("fluidity:p99>=0.9", Objective(SloMetric.FLUIDITY, 99.0, 0.9)),
        (" e2e : p50 <= 10 ", Objective(SloMetric.E2E, 50.0, 10.0)),
        ("tpot:p99.9<=0.05", Objective(SloMetric.TPOT, 99.9, 0.05)),
        ("normalized_latency:p100<=1e-1", Objective(SloMetric.NORMALIZED_LATENCY, 100.0, 0.1)),
        ("tbt:p90<=0", Objective(SloMetric.TBT, 90.0, 0.0)),
    ],
)
def test_parse_slo(text: str, expected: Objective) -> None:
    assert parse_objective(text) == expected


@pytest.mark.parametrize("text", ["ttft:p99<=0.5", "fluidity:p99.9>=0.9", "tbt:p50<=0.025"])
def test_slo_str_round_trips(text: str) -> None:
    assert str(parse_objective(text)) == text


@given(st.sampled_from(SloMetric), st.floats(0.01, 100.0), st.floats(0.0, 1e6))
def test_any_slo_round_trips_through_its_text(metric: SloMetric, percentile: float, threshold: float) -> None:
    slo = Objective(metric, percentile, threshold)
    assert parse_objective(str(slo)) == slo


BAD_SLOS = {
    "unknown metric": ("ttfb:p99<=0.5", f'unknown SLO metric "ttfb"; {VALID}'),
    "no colon": ("ttft", 'SLO "ttft" must look like metric:pNN<=threshold, e.g. ttft:p99<=0.5'),
    "no bound": ("ttft:p99", 'SLO "ttft:p99" needs a bound written pNN<=threshold or pNN>=threshold'),
    "strict operator": ("ttft:p99<0.5", 'SLO "ttft:p99<0.5" needs a bound written pNN<=threshold'),
    "bad percentile": (
        "ttft:q99<=0.5",
        'percentile "q99" must be p followed by a number in (0, 100], e.g. p99',
    ),
    "zero percentile": ("ttft:p0<=0.5", 'percentile "p0" must be p followed by a number in (0, 100]'),
    "percentile over 100": ("ttft:p101<=0.5", 'percentile "p101" must be p followed'),
    "text threshold": (
        "ttft:p99<=fast",
        'SLO "ttft:p99<=fast": threshold "fast" must be a finite number >= 0',
    ),
    "negative threshold": ("ttft:p99<=-1", 'threshold "-1" must be a finite number >= 0'),
    "infinite threshold": ("ttft:p99<=inf", 'threshold "inf" must be a finite number >= 0'),
    "fluidity upper bound": (
        "fluidity:p99<=0.9",
        'SLO "fluidity:p99<=0.9": fluidity is higher-is-better, so its bound is written with >=, not <=',
    ),
    "latency lower bound": (
        "ttft:p99>=0.5",
        "ttft is lower-is-better, so its bound is written with <=, not >=",
    ),
}


@pytest.mark.parametrize(("text", "message"), BAD_SLOS.values(), ids=BAD_SLOS.keys())
def test_parse_slo_errors_name_the_bad_part(text: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        parse_objective(text)
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("percentile", "threshold", "message"),
    [
        (0.0, 1.0, "SLO percentile must be in (0, 100], got 0.0"),
        (100.1, 1.0, "SLO percentile must be in (0, 100], got 100.1"),
        (99.0, -1.0, "SLO threshold must be finite and >= 0, got -1.0"),
        (99.0, NAN, "SLO threshold must be finite and >= 0, got nan"),
    ],
)
def test_slo_rejects_bad_fields(percentile: float, threshold: float, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        Objective(SloMetric.TTFT, percentile, threshold)
    assert message in str(raised.value)


def test_only_fluidity_is_higher_is_better() -> None:
    assert [m for m in SloMetric if m.higher_is_better] == [SloMetric.FLUIDITY]
    assert SloMetric("ttft") is SloMetric.TTFT


@pytest.mark.parametrize(
    ("slo", "observed", "met"),
    [
        ("ttft:p99<=0.99", 0.99, True),  # the 99th of 100 values, not the 100th
        ("ttft:p99<=0.98", 0.99, False),
        ("ttft:p100<=1", 1.0, True),
        ("ttft:p50<=0.5", 0.5, True),
        ("fluidity:p99>=0.02", 0.02, True),  # at least 99 of 100 values are >= 0.02
        ("fluidity:p99>=0.03", 0.02, False),
        ("fluidity:p100>=0.01", 0.01, True),
    ],
)
def test_evaluate_slo_nearest_rank(slo: str, observed: float, met: bool) -> None:
    result = evaluate_objective(parse_objective(slo), HUNDREDTHS)
    assert result == ObjectiveResult(parse_objective(slo), observed, parse_objective(slo).threshold, met, 100)


def test_evaluate_slo_ignores_nan() -> None:
    result = evaluate_objective(parse_objective("tpot:p100<=0.1"), [0.1, NAN, 0.05, NAN])
    assert (result.observed, result.met, result.sample_count) == (0.1, True, 2)


@pytest.mark.parametrize("values", [[], [NAN, NAN]], ids=["empty", "all-nan"])
def test_evaluate_slo_without_values_is_not_met(values: list[float]) -> None:
    result = evaluate_objective(parse_objective("ttft:p99<=100"), values)
    assert result.met is False
    assert math.isnan(result.observed)
    assert result.sample_count == 0


def test_evaluate_slos_uses_each_metric_s_values() -> None:
    slos = [parse_objective("ttft:p50<=0.2"), parse_objective("fluidity:p50>=0.9")]
    values: dict[SloMetric, ArrayLike] = {
        SloMetric.TTFT: [0.1, 0.2, 0.3],
        SloMetric.FLUIDITY: np.array([1.0, 0.5, 0.95]),
    }
    results = evaluate_objectives(slos, values)
    assert [(r.objective.metric, r.observed, r.met) for r in results] == [
        (SloMetric.TTFT, 0.2, True),
        (SloMetric.FLUIDITY, 0.95, True),
    ]


def test_evaluate_slos_names_the_missing_metric() -> None:
    with pytest.raises(ValueError, match='no values for SLO metric "e2e"; given: tbt, ttft'):
        evaluate_objectives([parse_objective("e2e:p99<=1")], {SloMetric.TTFT: [1.0], SloMetric.TBT: [1.0]})


@given(
    st.lists(st.one_of(st.sampled_from([0.1, 0.2, 0.5]), st.floats(0.0, 1.0), st.just(NAN)), max_size=50),
    st.integers(1, 100),
    st.floats(0.0, 1.0),
    st.booleans(),
)
def test_evaluate_slo_met_iff_enough_requests_meet_the_bound(
    values: list[float], percentile: int, threshold: float, fluidity: bool
) -> None:
    metric = SloMetric.FLUIDITY if fluidity else SloMetric.E2E
    result = evaluate_objective(Objective(metric, float(percentile), threshold), values)
    data = [v for v in values if not math.isnan(v)]
    meeting = sum((v >= threshold) if fluidity else (v <= threshold) for v in data)
    assert result.met == (bool(data) and meeting * 100 >= percentile * len(data))


BOUNDS = GoodputBounds(ttft=0.5, tpot=0.1, max_tbt=0.2, min_fluidity=0.9)
PER_REQUEST = {
    SloMetric.TTFT: [0.1, 0.6, 0.1, 0.1, 0.5, NAN],
    SloMetric.TPOT: [0.05, 0.05, NAN, 0.2, 0.1, NAN],
    SloMetric.TBT: [0.1, 0.1, NAN, 0.1, 0.2, NAN],
    SloMetric.FLUIDITY: [1.0, 1.0, 0.95, 1.0, 0.9, NAN],
    SloMetric.E2E: [9.0, 9.0, 9.0, 9.0, 9.0, 9.0],  # unbounded, so never checked
}


def test_goodput_is_the_conjunction_of_every_bound() -> None:
    # Request 1 misses TTFT and 3 misses TPOT; 2 and 5 have NaN metrics, which count as met; 4 is on
    # every bound exactly.
    assert goodput(BOUNDS, PER_REQUEST, duration_s=2.0) == Goodput(4, 6, 4 / 6, 2.0)


@pytest.mark.parametrize(
    ("bounds", "good"),
    [
        (GoodputBounds(), 6),
        (GoodputBounds(ttft=0.5), 5),
        (GoodputBounds(min_fluidity=0.96), 4),
        (GoodputBounds(e2e=8.0), 0),
        (GoodputBounds(tpot=0.1, ttft=0.1), 3),
    ],
)
def test_goodput_single_bounds(bounds: GoodputBounds, good: int) -> None:
    assert goodput(bounds, PER_REQUEST, duration_s=1.0).good == good


def test_goodput_of_no_requests() -> None:
    result = goodput(GoodputBounds(ttft=1.0), {SloMetric.TTFT: []}, duration_s=10.0)
    assert (result.good, result.total, result.rate_per_s) == (0, 0, 0.0)
    assert math.isnan(result.ratio)


@pytest.mark.parametrize(
    ("bounds", "values", "duration", "message"),
    [
        (BOUNDS, PER_REQUEST, 0.0, "goodput duration_s must be finite and > 0, got 0.0"),
        (BOUNDS, PER_REQUEST, math.inf, "goodput duration_s must be finite and > 0, got inf"),
        (GoodputBounds(e2e=1.0), {SloMetric.TTFT: [1.0]}, 1.0, 'no values for SLO metric "e2e"; given: ttft'),
        (
            GoodputBounds(ttft=1.0),
            {SloMetric.TTFT: [1.0, 2.0], SloMetric.TPOT: [1.0]},
            1.0,
            "per-request values must have one entry per request; got tpot=1, ttft=2",
        ),
    ],
)
def test_goodput_errors(
    bounds: GoodputBounds, values: dict[SloMetric, list[float]], duration: float, message: str
) -> None:
    with pytest.raises(ValueError) as raised:
        goodput(bounds, values, duration_s=duration)
    assert message in str(raised.value)


def test_goodput_bounds_reject_negative_values() -> None:
    with pytest.raises(ValueError, match=r"goodput bound max_tbt must be finite and >= 0, got -0\.1"):
        GoodputBounds(max_tbt=-0.1)


@given(
    st.lists(
        st.tuples(st.one_of(st.floats(0.0, 1.0), st.just(NAN)), st.one_of(st.floats(0.0, 1.0), st.just(NAN))),
        max_size=30,
    ),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
)
def test_goodput_matches_a_request_by_request_count(
    rows: list[tuple[float, float]], ttft_bound: float, fluidity_bound: float
) -> None:
    values = {SloMetric.TTFT: [r[0] for r in rows], SloMetric.FLUIDITY: [r[1] for r in rows]}
    result = goodput(GoodputBounds(ttft=ttft_bound, min_fluidity=fluidity_bound), values, duration_s=3.0)
    expected = sum(
        (math.isnan(t) or t <= ttft_bound) and (math.isnan(f) or f >= fluidity_bound) for t, f in rows
    )
    assert (result.good, result.total) == (expected, len(rows))
    assert result.rate_per_s == pytest.approx(expected / 3.0)


def test_decode_tiers() -> None:
    assert dict(DECODE_TIERS) == {"strict": 0.025, "medium": 0.05, "relaxed": 0.1}
    assert decode_tier("medium") == 0.05


def test_decode_tier_error_lists_valid_names() -> None:
    with pytest.raises(ValueError, match='unknown decode tier "fast"; valid: strict, medium, relaxed'):
        decode_tier("fast")


def test_decode_tiers_are_read_only() -> None:
    with pytest.raises(TypeError):
        DECODE_TIERS["fast"] = 0.01  # type: ignore[index]
