"""Pass-fraction intervals against scipy (a table and hypothesis), their exact coverage, and the verdict."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats

from exporter.stats.binomial import (
    Interval,
    Method,
    Verdict,
    beta_quantile,
    classify_fraction,
    clopper_pearson_interval,
    interval,
    regularized_incomplete_beta,
    wilson_interval,
)

# Clopper-Pearson inverts the incomplete beta numerically: ~1e-13 measured, 1e-10 promised.
CP_TOLERANCE = 1e-10
WILSON_TOLERANCE = 1e-12  # closed form: only rounding differs


def scipy_interval(successes: int, trials: int, confidence: float, method: Method) -> Interval:
    name = "exact" if method == "clopper-pearson" else "wilson"
    ci = stats.binomtest(successes, trials).proportion_ci(confidence, name)
    return Interval(float(ci.low), float(ci.high))


def assert_close(ours: Interval, theirs: Interval, tolerance: float) -> None:
    assert ours.low == pytest.approx(theirs.low, rel=tolerance, abs=tolerance)
    assert ours.high == pytest.approx(theirs.high, rel=tolerance, abs=tolerance)


@pytest.mark.parametrize("method", ["clopper-pearson", "wilson"])
@pytest.mark.parametrize(
    ("successes", "trials"),
    [
        (0, 1), (1, 1), (0, 2), (1, 2), (2, 2), (0, 10), (3, 10), (9, 10), (10, 10),
        (95, 100), (99, 100), (100, 100), (180, 200), (198, 200), (0, 1000), (1, 1000),
        (999, 1000), (9_000, 10_000), (99_000, 100_000), (500_000, 1_000_000), (999_999, 1_000_000),
    ],
)  # fmt: skip
@pytest.mark.parametrize("confidence", [0.8, 0.95, 0.99, 0.999])
def test_intervals_equal_scipy_on_a_table(
    successes: int, trials: int, confidence: float, method: Method
) -> None:
    tolerance = CP_TOLERANCE if method == "clopper-pearson" else WILSON_TOLERANCE
    ours = interval(successes, trials, confidence, method)
    assert_close(ours, scipy_interval(successes, trials, confidence, method), tolerance)


counts = st.integers(1, 3000).flatmap(lambda n: st.tuples(st.integers(0, n), st.just(n)))
large_counts = st.integers(10_000, 2_000_000).flatmap(
    lambda n: st.tuples(
        st.sampled_from([0, 1, n // 2, n - n // 100, n - 1, n]) | st.integers(0, n), st.just(n)
    )
)


@settings(max_examples=200, deadline=None)
@given(counts | large_counts, st.floats(0.5, 0.999), st.sampled_from(["clopper-pearson", "wilson"]))
def test_intervals_equal_scipy(count: tuple[int, int], confidence: float, method: Method) -> None:
    successes, trials = count
    ours = interval(successes, trials, confidence, method)
    tolerance = CP_TOLERANCE if method == "clopper-pearson" else WILSON_TOLERANCE
    assert_close(ours, scipy_interval(successes, trials, confidence, method), tolerance)
    assert 0.0 <= ours.low <= successes / trials <= ours.high <= 1.0
    assert (ours.low == 0.0) == (successes == 0)
    assert (ours.high == 1.0) == (successes == trials)


@settings(max_examples=100, deadline=None)
@given(counts, st.floats(0.5, 0.99), st.sampled_from(["clopper-pearson", "wilson"]))
def test_intervals_widen_with_confidence_and_move_with_successes(
    count: tuple[int, int], confidence: float, method: Method
) -> None:
    successes, trials = count
    base = interval(successes, trials, confidence, method)
    wider = interval(successes, trials, (confidence + 1) / 2, method)
    assert wider.low <= base.low and base.high <= wider.high
    if successes < trials:
        up = interval(successes + 1, trials, confidence, method)
        assert up.low >= base.low and up.high >= base.high


@pytest.mark.parametrize("trials", [20, 50, 100, 200])
@pytest.mark.parametrize("fraction", [0.9, 0.95, 0.97, 0.99])
def test_clopper_pearson_covers_at_least_the_confidence(trials: int, fraction: float) -> None:
    # Exact coverage: the probability, over the binomial outcomes, that the interval holds the fraction.
    assert coverage(trials, fraction, "clopper-pearson") >= 0.95


def test_wilson_coverage_dips_below_nominal_near_one() -> None:
    # Why classify_fraction defaults to Clopper-Pearson: at the fractions SLOs require, Wilson's
    # interval misses the true fraction more often than its confidence says.
    assert coverage(50, 0.99, "wilson") < 0.92
    assert coverage(100, 0.99, "wilson") < 0.93


def coverage(trials: int, fraction: float, method: Method) -> float:
    probabilities = stats.binom.pmf(range(trials + 1), trials, fraction)
    return float(sum(p for k, p in enumerate(probabilities) if fraction in interval(k, trials, 0.95, method)))


# --- the incomplete beta and its inverse ----------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.just(0.0) | st.floats(1e-300, 1.0), st.floats(0.01, 5000.0), st.floats(0.01, 5000.0))
def test_incomplete_beta_equals_scipy(x: float, a: float, b: float) -> None:
    # The documented error: a few units of 1e-16 times lgamma(a + b) (the log-beta's cancellation).
    # (Subnormal x is left out: there scipy is the one that is off, e.g. by 1% at x=5e-324, a=1/32, b=2.)
    tolerance = 1e-15 * max(10.0, math.lgamma(a + b))
    assert regularized_incomplete_beta(x, a, b) == pytest.approx(
        special.betainc(a, b, x), rel=tolerance, abs=1e-14
    )


def exact_incomplete_beta(x: float, a: int, b: int) -> Fraction:
    """``I_x(a, b)`` for whole shapes, in rational arithmetic: P(Binomial(a + b - 1, x) >= a)."""
    n, p = a + b - 1, Fraction(x)
    return sum((math.comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(a, n + 1)), Fraction(0))


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from([1e-300, 1e-30, 1e-6, 0.025, 0.5, 0.975, 1 - 1e-9]),
    st.integers(1, 60),
    st.integers(1, 60),
)
def test_beta_quantile_is_exact_in_rational_arithmetic(q: float, a: int, b: int) -> None:
    # Also in far tails, where scipy's betainc loses digits (at q=1e-300, a=55, b=17 it is off by 4e-3).
    x = beta_quantile(q, a, b)
    assert float(exact_incomplete_beta(x, a, b)) == pytest.approx(q, rel=1e-12)


@settings(max_examples=80, deadline=None)
@given(st.floats(1e-12, 1 - 1e-12), st.integers(1, 20_000), st.integers(1, 20_000))
def test_beta_quantile_equals_scipy_and_inverts(q: float, a: int, b: int) -> None:
    x = beta_quantile(q, a, b)
    assert x == pytest.approx(stats.beta.ppf(q, a, b), rel=1e-9, abs=CP_TOLERANCE)
    if 0.0 < x < 1.0 and q <= 0.5:  # the bracket ends on adjacent floats (above, on 1 - x's)
        assert (
            regularized_incomplete_beta(math.nextafter(x, 0.0), a, b)
            < q
            <= regularized_incomplete_beta(x, a, b)
        )


# --- the verdict ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("successes", "trials", "required", "expected"),
    [
        pytest.param(100, 100, 0.9, Verdict.PASS, id="all of 100 pass 90%: low end 0.964"),
        pytest.param(95, 100, 0.9, Verdict.INCONCLUSIVE, id="95 of 100 straddle 90%: 0.887-0.984"),
        pytest.param(80, 100, 0.9, Verdict.FAIL, id="80 of 100 fail 90%: high end 0.880"),
        pytest.param(198, 200, 0.95, Verdict.PASS, id="198 of 200 pass 95%: low end 0.964"),
        pytest.param(1, 1, 0.5, Verdict.INCONCLUSIVE, id="one request tells little"),
        pytest.param(0, 1, 0.97, Verdict.INCONCLUSIVE, id="one failure of one: high end 0.975"),
        pytest.param(0, 1, 0.99, Verdict.FAIL, id="one failure of one fails 99%"),
        pytest.param(0, 5, 0.99, Verdict.FAIL, id="five failures of five"),
        pytest.param(0, 3, 0.0, Verdict.PASS, id="nothing required always passes"),
        pytest.param(1000, 1000, 1.0, Verdict.INCONCLUSIVE, id="all required: never proven"),
        pytest.param(999, 1000, 1.0, Verdict.FAIL, id="all required: one failure fails"),
    ],
)
def test_classify_fraction(successes: int, trials: int, required: float, expected: Verdict) -> None:
    assert classify_fraction(successes, trials, required) == expected


def test_wilson_is_narrower_and_can_decide_sooner() -> None:
    # 171 of 200 against 90%: Clopper-Pearson reaches 0.9007, Wilson only 0.8971.
    assert classify_fraction(171, 200, 0.9, method="wilson") == Verdict.FAIL
    assert classify_fraction(171, 200, 0.9) == Verdict.INCONCLUSIVE
    for successes in (20, 50, 100, 171, 190):  # (at 0 and n successes Wilson is the wider one)
        wilson, exact = wilson_interval(successes, 200), clopper_pearson_interval(successes, 200)
        assert wilson.high - wilson.low < exact.high - exact.low


@settings(max_examples=200, deadline=None)
@given(counts, st.floats(0.0, 1.0), st.sampled_from(["clopper-pearson", "wilson"]))
def test_verdict_follows_the_interval(count: tuple[int, int], required: float, method: Method) -> None:
    successes, trials = count
    bounds = interval(successes, trials, method=method)
    verdict = classify_fraction(successes, trials, required, method=method)
    assert (verdict == Verdict.PASS) == (bounds.low >= required)
    assert (verdict == Verdict.FAIL) == (bounds.high < required)
    if verdict == Verdict.PASS:
        assert successes / trials >= required
    if verdict == Verdict.FAIL:
        assert successes / trials < required


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: wilson_interval(1, 0), "trials must be >= 1, got 0"),
        (lambda: clopper_pearson_interval(5, 4), "successes must be in [0, trials=4], got 5"),
        (lambda: clopper_pearson_interval(-1, 4), "successes must be in [0, trials=4], got -1"),
        (lambda: wilson_interval(1, 2, confidence=1.0), "confidence must be in (0, 1), got 1.0"),
        (lambda: classify_fraction(1, 2, 1.5), "required fraction must be in [0, 1], got 1.5"),
        (
            lambda: interval(1, 2, method="wald"),
            'unknown interval method "wald"; valid: clopper-pearson, wilson',
        ),  # type: ignore[arg-type]
        (lambda: regularized_incomplete_beta(0.5, 0.0, 1.0), "beta shapes must be > 0, got a=0.0, b=1.0"),
        (lambda: beta_quantile(1.5, 1.0, 1.0), "quantile must be in [0, 1], got 1.5"),
    ],
)
def test_bad_input_names_the_value(call: object, message: str) -> None:
    with pytest.raises(ValueError) as error:
        call()  # type: ignore[operator]
    assert message in str(error.value)
