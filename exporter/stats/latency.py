"""The conventional per-request latency metrics: TTFT, TBT, TPOT, E2E, normalized latency, tokens/s.

For a request with intervals ``x`` (``x[0]`` the time to first token, ``x[i]`` the gap before token ``i``)
and ``n = len(x)`` tokens:

* TTFT = ``x[0]``; TBT = every later gap ``x[1:]`` (zero gaps inside a multi-token chunk included);
* E2E = ``sum(x)`` unless the caller measured it, because a stream may end after its last token;
* TPOT = ``(E2E - TTFT) / (n - 1)``, NaN when ``n < 2``;
* normalized latency = ``E2E / n``; output tokens/s = ``n / E2E``, NaN when E2E is 0.

A request with no tokens has NaN for every metric and 0 tokens. ``request_latency`` computes one request
the obvious way; ``latency_batch`` computes a whole ``IntervalBatch`` with array operations only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from exporter.stats.batch import FloatArray, IntArray, IntervalBatch
from exporter.stats.distribution import percentile as percentile_of

BoolArray = NDArray[np.bool_]

# A caller-measured E2E comes from a different clock reading than the summed intervals, so it may
# undershoot the sum by rounding; only a shortfall beyond this relative slack is a real inconsistency.
_E2E_RELATIVE_SLACK = 1e-9


@dataclass(frozen=True, eq=False)
class RequestLatency:
    """The latency metrics of one request (NaN where a metric does not apply)."""

    ttft: float
    tbt: FloatArray
    max_tbt: float
    tpot: float
    e2e: float
    normalized_latency: float
    output_tokens_per_s: float
    tokens: int


@dataclass(frozen=True, eq=False)
class LatencyBatch:
    """The latency metrics of many requests: one array entry per request, plus every TBT pooled.

    ``tbt`` holds every later gap of every request back to back (request order); ``max_tbt`` is each
    request's largest gap, the value a per-request TBT bound is checked against.
    """

    ttft: FloatArray
    tpot: FloatArray
    e2e: FloatArray
    normalized_latency: FloatArray
    output_tokens_per_s: FloatArray
    tokens: IntArray
    tbt: FloatArray
    max_tbt: FloatArray

    def __len__(self) -> int:
        return len(self.tokens)


def request_latency(intervals: ArrayLike, *, e2e: float | None = None) -> RequestLatency:
    """Latency metrics of one request; ``e2e`` (seconds) overrides the sum of its intervals."""
    x = IntervalBatch.single(intervals).request(0)
    n = len(x)
    total = math.fsum(x)
    if e2e is not None:
        _check_scalar_e2e(e2e, total)
    if n == 0:
        nan = math.nan
        return RequestLatency(nan, x, nan, nan, nan, nan, nan, 0)
    end = total if e2e is None or math.isnan(e2e) else float(e2e)
    tbt = x[1:]
    return RequestLatency(
        ttft=float(x[0]),
        tbt=tbt,
        max_tbt=float(np.max(tbt)) if n > 1 else math.nan,
        tpot=(end - float(x[0])) / (n - 1) if n > 1 else math.nan,
        e2e=end,
        normalized_latency=end / n,
        output_tokens_per_s=n / end if end > 0.0 else math.nan,
        tokens=n,
    )


def latency_batch(batch: IntervalBatch, *, e2e: ArrayLike | None = None) -> LatencyBatch:
    """Latency metrics of every request in ``batch`` without a Python loop over requests.

    ``e2e`` optionally gives each request's measured end-to-end time; a NaN entry means "not measured"
    and falls back to the sum of that request's intervals.
    """
    lengths = batch.lengths
    has_token = lengths > 0
    starts = batch.offsets[:-1]
    ttft = _where(has_token, batch.values[starts[has_token]], len(batch))
    total = _segment_sums(batch.values, starts, has_token)
    end = _resolve_e2e(e2e, total, has_token)
    tbt, tbt_lengths = _pooled_tbt(batch, starts[has_token])
    n = lengths.astype(np.float64)
    return LatencyBatch(
        ttft=ttft,
        tpot=_divide(end - ttft, n - 1.0),
        e2e=end,
        normalized_latency=_divide(end, n),
        output_tokens_per_s=_divide(np.where(has_token, n, np.nan), end),
        tokens=lengths.copy(),
        tbt=tbt,
        max_tbt=_segment_max(tbt, tbt_lengths),
    )


def decode_rate_from_tpot(tpot_values: ArrayLike, percentile: float) -> float:
    """The "TPOT-based" decode rate in tokens/s: 1 / the ``percentile``-th percentile (0-100) of TPOT."""
    return _rate(tpot_values, percentile)


def decode_rate_from_tbt(tbt_values: ArrayLike, percentile: float) -> float:
    """The "TBT-based" decode rate in tokens/s: 1 / the ``percentile``-th percentile (0-100) of TBT.

    With chunked streaming most gaps are zero, so low percentiles of TBT are 0 and the rate is
    infinite: the very blind spot the fluid token rate is meant to fix.
    """
    return _rate(tbt_values, percentile)


def _rate(seconds_per_token: ArrayLike, q: float) -> float:
    seconds = percentile_of(seconds_per_token, q)
    if math.isnan(seconds):
        return math.nan
    return math.inf if seconds == 0.0 else 1.0 / seconds


def _check_scalar_e2e(e2e: float, total: float) -> None:
    if math.isnan(e2e):
        return
    if not math.isfinite(e2e) or e2e < total * (1.0 - _E2E_RELATIVE_SLACK):
        raise ValueError(
            f"e2e is {e2e!r} s but the intervals sum to {total!r} s; e2e must be finite and at least "
            "the time of the last token"
        )


def _where(mask: BoolArray, picked: FloatArray, size: int) -> FloatArray:
    """An array of ``size`` NaN with ``picked`` written where ``mask`` is true."""
    out = np.full(size, np.nan)
    out[mask] = picked
    return out


def _segment_sums(values: FloatArray, starts: IntArray, has_token: BoolArray) -> FloatArray:
    # reduceat over the starts of non-empty requests only: each such segment then ends exactly where
    # the next non-empty one starts (empty requests in between have no values), and reduceat never
    # sees a repeated index, which it would answer with a single value instead of an empty sum.
    picked = np.add.reduceat(values, starts[has_token]) if values.size else np.empty(0)
    return _where(has_token, picked, len(starts))


def _segment_max(values: FloatArray, lengths: IntArray) -> FloatArray:
    """Each segment's largest value (NaN for empty segments); segments lie back to back in ``values``."""
    nonempty = lengths > 0
    starts = np.cumsum(lengths) - lengths
    picked = np.maximum.reduceat(values, starts[nonempty]) if values.size else np.empty(0)
    return _where(nonempty, picked, len(lengths))


def _pooled_tbt(batch: IntervalBatch, first_token_positions: IntArray) -> tuple[FloatArray, IntArray]:
    """Every gap after the first token, back to back, and how many each request has."""
    keep = np.ones(batch.token_count, dtype=np.bool_)
    keep[first_token_positions] = False
    return batch.values[keep], np.maximum(batch.lengths - 1, 0)


def _resolve_e2e(e2e: ArrayLike | None, total: FloatArray, has_token: BoolArray) -> FloatArray:
    if e2e is None:
        return total
    given = np.asarray(e2e, dtype=np.float64)
    if given.shape != total.shape:
        raise ValueError(f"e2e has shape {given.shape}; expected one value per request {total.shape}")
    _check_batch_e2e(given, total)
    return np.where(has_token & ~np.isnan(given), given, total)


def _check_batch_e2e(given: FloatArray, total: FloatArray) -> None:
    measured = ~np.isnan(given)
    floor = np.nan_to_num(total) * (1.0 - _E2E_RELATIVE_SLACK)
    bad = np.flatnonzero(measured & (~np.isfinite(given) | (given < floor)))
    if len(bad):
        r = int(bad[0])
        raise ValueError(
            f"e2e of request {r} is {float(given[r])!r} s but its intervals sum to {float(total[r])!r} s; "
            "e2e must be finite and at least the time of the last token"
        )


def _divide(numerator: FloatArray, denominator: FloatArray) -> FloatArray:
    """``numerator / denominator`` with NaN wherever the denominator is zero, negative or NaN."""
    out = np.full(np.broadcast(numerator, denominator).shape, np.nan)
    # A subnormal denominator overflows to inf, as Python's own float division does; not worth a warning.
    with np.errstate(over="ignore"):
        np.divide(numerator, denominator, out=out, where=denominator > 0.0)
    return out
