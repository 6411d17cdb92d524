"""Confidence intervals for a pass fraction (``k`` successes of ``n``), and a pass/fail/inconclusive verdict.

Pure Python (``math`` and the standard library's ``statistics.NormalDist`` for the normal quantile),
so the capacity search can decide a trial without numpy or scipy:

* ``wilson_interval``: the Wilson score interval, closed form, close to nominal coverage on average.
* ``clopper_pearson_interval``: the exact interval, from quantiles of the beta distribution, found
  by bisection on the regularized incomplete beta function (a continued fraction). Its coverage is at
  least the confidence level for every ``n`` and every true fraction.
* ``classify_fraction``: "at least a fraction ``p`` of requests succeed" judged from the interval:
  pass when the interval lies at or above ``p``, fail when it lies below, inconclusive when it straddles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from statistics import NormalDist
from typing import Literal

__all__ = [
    "DEFAULT_CONFIDENCE",
    "METHODS",
    "Interval",
    "Method",
    "Verdict",
    "beta_quantile",
    "classify_fraction",
    "clopper_pearson_interval",
    "interval",
    "regularized_incomplete_beta",
    "wilson_interval",
]

DEFAULT_CONFIDENCE = 0.95
Method = Literal["clopper-pearson", "wilson"]
METHODS: tuple[Method, ...] = ("clopper-pearson", "wilson")

_TINY = 1e-300  # Lentz's guard against a zero denominator
_CF_EPSILON = 1e-16  # a continued-fraction term this close to 1 changes nothing in a double
_QUANTILE_STEPS = 2000  # bisection steps at most: ends on adjacent floats long before (~60-1100 steps)


@dataclass(frozen=True)
class Interval:
    """A confidence interval for a fraction: ``low <= high``, both in ``[0, 1]``."""

    low: float
    high: float

    def __contains__(self, fraction: float) -> bool:
        return self.low <= fraction <= self.high


class Verdict(StrEnum):
    """The outcome of judging "at least a fraction ``p`` succeed" from a confidence interval."""

    PASS = "pass"
    FAIL = "fail"
    INCONCLUSIVE = "inconclusive"


def wilson_interval(successes: int, trials: int, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """The Wilson score interval for ``successes`` of ``trials`` at ``confidence`` (two-sided).

    Inverts the normal test of the fraction with the variance at the hypothesised fraction, so unlike
    the Wald interval it never collapses to a point at 0 or ``n`` successes and stays inside [0, 1].
    """
    _check_counts(successes, trials)
    z = _normal_quantile(confidence)
    n, z2 = float(trials), z * z
    centre = (successes + z2 / 2) / (n + z2)
    half = z / (n + z2) * math.sqrt(successes * (trials - successes) / n + z2 / 4)
    # At 0 and n successes the bound is exactly the end (the formula leaves a rounding residue).
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return Interval(low, high)


def clopper_pearson_interval(successes: int, trials: int, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """The Clopper-Pearson ("exact") interval for ``successes`` of ``trials`` at ``confidence``.

    Its ends are the fractions at which seeing at least (at most) ``successes`` has probability
    ``(1 - confidence) / 2``: beta quantiles ``B(a/2; k, n-k+1)`` and ``B(1-a/2; k+1, n-k)``. At 0
    successes the low end is 0, at ``n`` the high end is 1, and the other end has a closed form there.
    """
    _check_counts(successes, trials)
    tail = (1.0 - _check_confidence(confidence)) / 2
    k, n = successes, trials
    if k == 0:
        return Interval(0.0, 1.0 - tail ** (1.0 / n))
    if k == n:
        return Interval(tail ** (1.0 / n), 1.0)
    return Interval(beta_quantile(tail, k, n - k + 1), beta_quantile(1.0 - tail, k + 1, n - k))


def fewest_to_confirm(required: float, confidence: float = DEFAULT_CONFIDENCE) -> int:
    """The fewest requests, every one a success, whose Clopper-Pearson interval lies at or above
    ``required``: ``tail ** (1 / n) >= required`` (at 95% confidence: 368 for 99%, 72 for 95%, 36 for
    90%). Fewer can never confirm the fraction, whatever they show."""
    if not 0.0 < required < 1.0:
        raise ValueError(f"required fraction must be in (0, 1), got {required!r}")
    tail = (1.0 - _check_confidence(confidence)) / 2
    n = max(1, math.ceil(math.log(tail) / math.log(required)))
    while n > 1 and clopper_pearson_interval(n - 1, n - 1, confidence).low >= required:
        n -= 1  # the closed form's rounding, either way
    while clopper_pearson_interval(n, n, confidence).low < required:
        n += 1
    return n


def interval(
    successes: int,
    trials: int,
    confidence: float = DEFAULT_CONFIDENCE,
    method: Method = "clopper-pearson",
) -> Interval:
    """The interval of ``method`` ("clopper-pearson" or "wilson")."""
    if method == "clopper-pearson":
        return clopper_pearson_interval(successes, trials, confidence)
    if method == "wilson":
        return wilson_interval(successes, trials, confidence)
    raise ValueError(f'unknown interval method "{method}"; valid: {", ".join(METHODS)}')


def classify_fraction(
    successes: int,
    trials: int,
    required: float,
    confidence: float = DEFAULT_CONFIDENCE,
    method: Method = "clopper-pearson",
) -> Verdict:
    """Judge "at least a fraction ``required`` of requests succeed" from ``successes`` of ``trials``.

    PASS when the whole interval lies at or above ``required``, FAIL when it lies below, INCONCLUSIVE
    when it straddles ``required`` (more requests are needed to tell).

    The default interval is Clopper-Pearson because a verdict is an error bound: with it, the chance of
    a PASS when the true fraction is below ``required`` is at most ``(1 - confidence) / 2``, for every
    number of trials and every true fraction (and likewise for a FAIL above it). Wilson's interval is
    narrower and its coverage is near nominal on average, but it dips below nominal for some
    fractions, worst near 0 and 1, which is where success requirements (0.9-0.99) sit; choose it with
    ``method="wilson"`` when fewer inconclusive trials matter more than that guarantee.
    """
    if not 0.0 <= required <= 1.0:
        raise ValueError(f"required fraction must be in [0, 1], got {required!r}")
    bounds = interval(successes, trials, confidence, method)
    if bounds.low >= required:
        return Verdict.PASS
    if bounds.high < required:
        return Verdict.FAIL
    return Verdict.INCONCLUSIVE


def regularized_incomplete_beta(x: float, a: float, b: float) -> float:
    """``I_x(a, b)``, the CDF at ``x`` of the beta distribution with shapes ``a, b > 0``.

    Lentz's evaluation of the continued fraction (Numerical Recipes, ``betacf``), which converges fast
    for ``x < (a + 1) / (a + b + 2)``; above that, ``I_x(a, b) = 1 - I_{1-x}(b, a)``. Relative error a
    few units of 1e-16 times the size of ``lgamma(a + b)`` (about 1e-10 at a million trials).
    """
    if not (a > 0 and b > 0):
        raise ValueError(f"beta shapes must be > 0, got a={a!r}, b={b!r}")
    if not 0.0 <= x <= 1.0:
        raise ValueError(f"x must be in [0, 1], got {x!r}")
    if x in (0.0, 1.0):
        return x
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _incomplete_beta_by_fraction(1.0 - x, b, a)
    return _incomplete_beta_by_fraction(x, a, b)


def beta_quantile(q: float, a: float, b: float) -> float:
    """The ``x`` with ``I_x(a, b) = q``, by bisection on ``[0, 1]`` until the bracket is two adjacent
    floats (``I`` is increasing in ``x``), so as exact as ``regularized_incomplete_beta`` allows.

    Above the median it is found as ``1 - x'`` with ``I_x'(b, a) = 1 - q``: near 1, a double holds
    ``1 - x`` (and ``1 - q``) far more precisely than ``x``.
    """
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {q!r}")
    if q in (0.0, 1.0):
        return q
    if q > 0.5:
        return 1.0 - _lower_quantile(1.0 - q, b, a)
    return _lower_quantile(q, a, b)


def _lower_quantile(q: float, a: float, b: float) -> float:
    low, high = 0.0, 1.0
    for _ in range(_QUANTILE_STEPS):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        if regularized_incomplete_beta(middle, a, b) < q:
            low = middle
        else:
            high = middle
    return high


def _incomplete_beta_by_fraction(x: float, a: float, b: float) -> float:
    log_front = a * math.log(x) + b * math.log1p(-x) - _log_beta(a, b)
    return math.exp(log_front) * _beta_continued_fraction(x, a, b) / a


def _log_beta(a: float, b: float) -> float:
    return math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)


def _beta_continued_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of ``I_x(a, b)``, even and odd steps together (modified Lentz)."""
    c, d = 1.0, _guard(1.0 - (a + b) * x / (a + 1.0))
    d = 1.0 / d
    result = d
    # It converges in O(sqrt(max(a, b))) steps; the limit only stops a runaway.
    for m in range(1, 200 + int(50 * math.sqrt(max(a, b)))):
        even = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
        d, c = 1.0 / _guard(1.0 + even * d), _guard(1.0 + even / c)
        result *= d * c
        odd = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
        d, c = 1.0 / _guard(1.0 + odd * d), _guard(1.0 + odd / c)
        step = d * c
        result *= step
        if abs(step - 1.0) < _CF_EPSILON:
            return result
    raise ArithmeticError(f"incomplete beta continued fraction did not converge (x={x}, a={a}, b={b})")


def _guard(value: float) -> float:
    return value if abs(value) >= _TINY else _TINY


def _normal_quantile(confidence: float) -> float:
    return NormalDist().inv_cdf(1.0 - (1.0 - _check_confidence(confidence)) / 2)


def _check_confidence(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return confidence


def _check_counts(successes: int, trials: int) -> None:
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials!r}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes must be in [0, trials={trials}], got {successes!r}")
