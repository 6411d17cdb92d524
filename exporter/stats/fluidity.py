"""Etalon's fluidity-index and fluid token generation rate, exact and vectorised.

The fluidity-index (Agrawal et al., "Etalon: Holistic Performance Evaluation Framework for LLM
Inference Systems") gives every output token a deadline: the prefill deadline ``Dp`` for the first
token, the decode deadline ``Dd`` for each later one. With ``slack = 0``, for each token with interval
``t`` and deadline ``D``:

* on time when ``t <= D + slack``: ``slack += D - t`` (early tokens bank slack for later ones), one
  deadline met;
* otherwise late: ``floor((t - slack - D) / Dd) + 1`` deadlines missed (a stall is penalised for every
  deadline it spans, counted in units of ``Dd`` for the first token too), each added to the missed and
  the total count, and ``slack = 0`` (deadlines restart after the stall).

``fluidity = 1 - missed / total``; a request with no deadlines has fluidity 1.0. The ``"tokens"``
variant is the simpler one in Etalon's documentation: the fraction of tokens on time, slack reset on a
miss. Options: skip the first token (decode-only fluidity) and cap the banked slack (a client-side
playback buffer; unbounded by default, which is Etalon's behaviour).

Exactness. Every result here equals, bit for bit, what the literal per-token loop over Python floats
gives (``fluidity_engines.loop_request``; the tests keep their own copy as the reference). Two
vectorised engines do the work (``fluidity_engines``): ``evaluate`` looks one by one only at the tokens
that can be late and hands a request to the loop when rounding could decide it; the minimum-deadline
bisection (``min_deadline``) decides each step from the late tokens by Lindley's prefix form, replaying
the loop's float additions where rounding could decide, or, with a slack cap, sweeps token positions
across all requests, replaying the loop's float operations.

Counts are float64 internally: exact up to 2**53 missed deadlines per request.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from exporter.stats.accounting import (
    VARIANTS,
    Deadline,
    FluidityBatch,
    FluidityOptions,
    RequestFluidity,
    Variant,
)
from exporter.stats.batch import FloatArray, IntervalBatch
from exporter.stats.distribution import nearest_rank
from exporter.stats.fluidity_engines import evaluate_by_points, loop_request
from exporter.stats.min_deadline import min_deadlines
from exporter.stats.objectives import DEFAULT_PERCENTILE, DEFAULT_TARGET_FLUIDITY

__all__ = [
    "VARIANTS",
    "FluidityBatch",
    "FluidityOptions",
    "MissRateCurve",
    "RequestFluidity",
    "Variant",
    "deadline_miss_curve",
    "deadline_misses",
    "evaluate",
    "fluid_token_rate",
    "fluidity_index",
    "min_decode_deadline",
    "min_decode_deadlines",
    "request_fluidity",
]


@dataclass(frozen=True, eq=False)
class MissRateCurve:
    """Token-weighted deadline-miss rate at each decode deadline (the Etalon paper's Figure 5d)."""

    decode_deadlines: FloatArray
    miss_rate: FloatArray


def evaluate(
    batch: IntervalBatch,
    prefill_deadline: Deadline,
    decode_deadline: Deadline,
    options: FluidityOptions | None = None,
) -> FluidityBatch:
    """Deadline accounting of every request in ``batch`` in one vectorised sweep."""
    options = options or FluidityOptions()
    dp = _per_request(_checked(prefill_deadline, "prefill deadline", allow_zero=True), len(batch))
    dd = _per_request(_checked(decode_deadline, "decode deadline", allow_zero=False), len(batch))
    return evaluate_by_points(batch, dp, dd, options)


def request_fluidity(
    intervals: ArrayLike,
    prefill_deadline: float,
    decode_deadline: float,
    options: FluidityOptions | None = None,
) -> RequestFluidity:
    """Deadline accounting and stall statistics of one request, by the per-token loop: the definition
    itself, which for one request costs a tenth of the vectorised engine's set-up and sweep or less
    (measured, CPU for 1,000 tokens: 0.12 ms from an array, 0.30 from a list, against 3.7-3.9 ms;
    ``bench/stats_bench.py``; over the default bench's own 100 streams, 0.09 against 0.70 ms a
    request). ``bench``'s live line evaluates every finished request on the probe's event loop, whose
    lateness beyond 3 ms makes the client distrust the streams in flight (``streams.saturation``).
    Invalid input goes to the engine, whose error names it."""
    options = options or FluidityOptions()
    values = np.asarray(intervals, dtype=np.float64)
    if _loopable(values, prefill_deadline, decode_deadline):
        return loop_request(values.tolist(), float(prefill_deadline), float(decode_deadline), options)
    return evaluate(IntervalBatch.single(values), prefill_deadline, decode_deadline, options).request(0)


def _loopable(values: FloatArray, prefill_deadline: float, decode_deadline: float) -> bool:
    """Valid input for ``loop_request``: finite intervals >= 0, a finite ``Dp >= 0`` and ``Dd > 0``."""
    deadlines_valid = math.isfinite(prefill_deadline) and prefill_deadline >= 0
    deadlines_valid = deadlines_valid and math.isfinite(decode_deadline) and decode_deadline > 0
    return (
        deadlines_valid and values.ndim == 1 and bool((values >= 0.0).all()) and math.isfinite(values.sum())
    )


def deadline_misses(
    intervals: ArrayLike,
    prefill_deadline: float,
    decode_deadline: float,
    options: FluidityOptions | None = None,
) -> tuple[int, int]:
    """``(missed, total)`` deadlines of one request."""
    result = request_fluidity(intervals, prefill_deadline, decode_deadline, options)
    return result.missed, result.total


def fluidity_index(
    intervals: ArrayLike,
    prefill_deadline: float,
    decode_deadline: float,
    options: FluidityOptions | None = None,
) -> float:
    """The fluidity-index of one request: ``1 - missed / total`` (1.0 with no deadlines)."""
    return request_fluidity(intervals, prefill_deadline, decode_deadline, options).fluidity


def deadline_miss_curve(
    batch: IntervalBatch,
    decode_deadlines: Sequence[float] | FloatArray,
    *,
    prefill_deadline: float | None = None,
    options: FluidityOptions | None = None,
) -> MissRateCurve:
    """Token-weighted miss rate at each decode deadline; decode-only when ``prefill_deadline`` is None."""
    options = options or FluidityOptions()
    if prefill_deadline is None:
        options = FluidityOptions(True, options.slack_cap, options.variant)
    deadlines = np.asarray(decode_deadlines, dtype=np.float64).reshape(-1)
    rates = np.empty(len(deadlines))
    for k, dd in enumerate(deadlines):
        level = evaluate(batch, prefill_deadline or 0.0, float(dd), options).service_level
        rates[k] = np.nan if level is None else 1.0 - level
    return MissRateCurve(deadlines, rates)


def min_decode_deadlines(
    batch: IntervalBatch,
    target_fluidity: float = DEFAULT_TARGET_FLUIDITY,
    *,
    slack_cap: float | None = None,
    variant: Variant = "deadlines",
) -> FloatArray:
    """Per request, the smallest ``Dd`` at which its decode-only fluidity reaches ``target_fluidity``.

    Fluidity never falls as ``Dd`` grows, and every decode token is on time once ``Dd`` reaches the
    request's longest decode gap, so the answer lies in ``(0, longest gap]``. It is found by bisection
    on the bit patterns of positive floats (ordered like the floats themselves), which ends on two
    adjacent floats: the result passes and the float just below it fails, i.e. machine precision, not a
    grid. All requests are bisected together (at most 63 steps): without a slack cap each step is
    decided from the late tokens only (``min_deadline``), with one a vectorised sweep per step.
    A request with fewer than two tokens, or whose decode gaps are all zero, meets any positive
    deadline: its result is 0.0.
    """
    _check_target_fluidity(target_fluidity)
    options = FluidityOptions(ignore_first_token=True, slack_cap=slack_cap, variant=variant)
    return min_deadlines(batch, target_fluidity, options)


def min_decode_deadline(
    intervals: ArrayLike,
    target_fluidity: float = DEFAULT_TARGET_FLUIDITY,
    *,
    slack_cap: float | None = None,
    variant: Variant = "deadlines",
) -> float:
    """The smallest ``Dd`` at which one request's decode-only fluidity reaches ``target_fluidity``."""
    batch = IntervalBatch.single(intervals)
    return float(min_decode_deadlines(batch, target_fluidity, slack_cap=slack_cap, variant=variant)[0])


def fluid_token_rate(
    requests: IntervalBatch | Iterable[ArrayLike],
    target_fluidity: float = DEFAULT_TARGET_FLUIDITY,
    percentile: float = DEFAULT_PERCENTILE,
    *,
    slack_cap: float | None = None,
    variant: Variant = "deadlines",
) -> float:
    """Fluid token generation rate: the highest playback rate (tokens/s) at which ``percentile``% of
    requests reach decode-only fluidity ``>= target_fluidity``.

    That is ``1 / v`` where ``v`` is the smallest per-request minimum deadline such that at least
    ``percentile``% of requests have a minimum ``<= v`` (nearest rank, so the promise holds exactly at
    the reported rate). Requests with fewer than two tokens carry no decode deadline and are left out.
    Returns ``inf`` when every considered request meets any positive deadline.
    """
    if not 0.0 < percentile <= 100.0:
        raise ValueError(f"percentile must be in (0, 100], got {percentile!r}")
    batch = requests if isinstance(requests, IntervalBatch) else IntervalBatch.from_sequences(requests)
    minima = min_decode_deadlines(batch, target_fluidity, slack_cap=slack_cap, variant=variant)
    minima = minima[batch.lengths >= 2]
    if len(minima) == 0:
        raise ValueError("the fluid token rate needs at least one request with two or more tokens")
    deadline = nearest_rank(minima, percentile / 100.0)
    return 1.0 / deadline if deadline > 0 else float("inf")


def _check_target_fluidity(target: float) -> None:
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target fluidity must be in (0, 1], got {target!r}")


def _checked(value: Deadline, name: str, *, allow_zero: bool) -> FloatArray:
    values = np.asarray(value, dtype=np.float64)
    valid = np.isfinite(values) & ((values >= 0) if allow_zero else (values > 0))
    if not np.all(valid):
        bad = values if values.ndim == 0 else values[~valid][0]
        bound = "finite number >= 0" if allow_zero else "finite number > 0"
        raise ValueError(f"{name} must be a {bound} seconds, got {float(bad)!r}")
    return values


def _per_request(values: FloatArray, requests: int) -> FloatArray:
    if values.ndim == 0:
        return np.full(requests, float(values))
    if values.shape != (requests,):
        raise ValueError(f"a per-request deadline needs {requests} values, got {values.size}")
    return values
