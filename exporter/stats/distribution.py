"""Summaries of a sample of values: count, mean, extremes and percentiles, ignoring NaN.

Two percentile definitions live here because they answer different questions:

* ``percentile`` interpolates linearly between order statistics (numpy's default, what latency reports
  print as "p99"). It may return a value that no request saw.
* ``nearest_rank`` answers the SLO question "what bound do at least P% of requests meet?". It always
  returns an observed value, so "p99 <= 0.5 s" means at least 99% of requests took at most 0.5 s.

NaN marks a value that does not apply (TPOT of a one-token request), so every function drops NaN first.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from fractions import Fraction

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]

# Percentile fractions usually arrive as decimal literals or P / 100 (0.99, 0.07, 99.9 / 100) whose
# binary value is a hair above or below the intended rational; 0.07 * 100 is 7.000000000000001, whose
# ceiling would be rank 8 instead of 7. The closest fraction with a denominator up to 1e9 recovers the
# intended value for any percentile with up to six decimals, and the rank is then exact.
_MAX_FRACTION_DENOMINATOR = 10**9

_REPORT_PERCENTILES = (50.0, 90.0, 95.0, 99.0)


@dataclass(frozen=True)
class Distribution:
    """Summary of a sample; every float field is NaN when ``count`` is 0."""

    count: int
    mean: float
    min: float
    max: float
    p50: float
    p90: float
    p95: float
    p99: float

    def to_dict(self) -> dict[str, float | int | None]:
        """Plain data for JSON; NaN becomes ``None`` because JSON has no NaN."""
        return {key: _json_number(value) for key, value in asdict(self).items()}


def without_nan(values: ArrayLike) -> FloatArray:
    """``values`` as a flat float64 array without its NaN entries (infinities are kept)."""
    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    return flat[~np.isnan(flat)]


def describe(values: ArrayLike) -> Distribution:
    """Count, mean, min, max and linearly interpolated p50/p90/p95/p99 of the non-NaN ``values``."""
    sample = without_nan(values)
    if len(sample) == 0:
        nan = math.nan
        return Distribution(0, nan, nan, nan, nan, nan, nan, nan)
    p50, p90, p95, p99 = (float(p) for p in np.percentile(sample, _REPORT_PERCENTILES))
    return Distribution(
        count=len(sample),
        mean=float(np.mean(sample)),
        min=float(np.min(sample)),
        max=float(np.max(sample)),
        p50=p50,
        p90=p90,
        p95=p95,
        p99=p99,
    )


def percentile(values: ArrayLike, q: float) -> float:
    """The ``q``-th percentile (0-100) of the non-NaN ``values``, linearly interpolated; NaN if none."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be in [0, 100], got {q!r}")
    sample = without_nan(values)
    if len(sample) == 0:
        return math.nan
    return float(np.percentile(sample, q))


def nearest_rank(values: ArrayLike, fraction: float, *, largest: bool = False) -> float:
    """The bound that at least ``fraction`` of the non-NaN ``values`` meet; NaN if there are none.

    With ``largest=False``: the smallest ``v`` such that at least ``fraction`` of the values are
    ``<= v`` (a lower-is-better bound such as latency). With ``largest=True``: the largest ``v`` such
    that at least ``fraction`` of the values are ``>= v`` (a higher-is-better bound such as fluidity).
    ``fraction`` must be in (0, 1].
    """
    sample = without_nan(values)
    rank = nearest_rank_index(len(sample), fraction)
    if len(sample) == 0:
        return math.nan
    index = len(sample) - rank if largest else rank - 1
    return float(np.partition(sample, index)[index])


def nearest_rank_index(count: int, fraction: float) -> int:
    """How many of ``count`` values must meet a bound met by at least ``fraction`` of them (>= 1).

    Returns 0 only when ``count`` is 0.
    """
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"nearest-rank fraction must be in (0, 1], got {fraction!r}")
    exact = Fraction(fraction).limit_denominator(_MAX_FRACTION_DENOMINATOR)
    return math.ceil(exact * count)


def _json_number(value: float | int) -> float | int | None:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
