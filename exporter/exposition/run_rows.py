"""A stored probe run as window rows: one per request, completed then failed, with its goodput flag.

Apart from the store (``store``) because it is a pure function of one run's figures: ``measure`` has
judged the run, and these turn its results into the columns of ``window.Records`` (the store only
appends them and keeps its counters).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

from exporter.evaluation import DeadlinePolicy, Measured, metric_values, slo_tier
from exporter.exposition.window import (
    AT,
    DEADLINES,
    E2E,
    FLUIDITY,
    GOOD,
    LATENESS,
    MAX_TBT,
    MIN_DECODE_DEADLINE,
    MISSED,
    NORMALIZED,
    OUTCOME,
    OUTCOME_CODE,
    TOKENS,
    TPOT,
    TTFT,
    Records,
    build_records,
    tier_column,
)
from exporter.stats.batch import FloatArray
from exporter.stats.fluidity import min_decode_deadlines
from exporter.stats.objectives import GoodputBounds, good_requests
from exporter.streams.result import ProbeResult


def good_flags(
    bounds: GoodputBounds | None, measured: Measured, policy: DeadlinePolicy, failures: int
) -> FloatArray:
    """1.0 / 0.0 per completed request then per failure (never good); NaN without bounds."""
    completed = len(measured.results)
    if bounds is None:
        return np.full(completed + failures, np.nan)
    flags = good_requests(bounds, metric_values(measured, slo_tier(policy)))
    return np.concatenate([flags.astype(np.float64), np.zeros(failures)])


def run_rows(
    measured: Measured,
    failed: Sequence[ProbeResult],
    good: FloatArray,
    policy: DeadlinePolicy,
    now: float,
    *,
    fluid_rate: bool = True,
) -> Records:
    """The rows of one run; without ``fluid_rate`` its minimum decode deadlines are not searched for
    (NaN: the window then has no fluid token rate), for they cost more than every other figure."""
    done = measured.results
    nan_failed = np.full(len(failed), np.nan)
    latency = measured.latency
    if fluid_rate:
        minima = min_decode_deadlines(measured.batch, policy.target_fluidity)
        minima = np.where(measured.batch.lengths >= 2, minima, np.nan)  # no decode deadline below 2 tokens
    else:
        minima = np.full(len(done), np.nan)
    columns: dict[str, ArrayLike] = {
        AT: np.full(len(done) + len(failed), now),
        OUTCOME: [OUTCOME_CODE[r.outcome] for r in (*done, *failed)],
        TOKENS: np.concatenate([latency.tokens, np.zeros(len(failed), dtype=np.int64)]),
        TTFT: np.concatenate([latency.ttft, nan_failed]),
        TPOT: np.concatenate([latency.tpot, nan_failed]),
        E2E: np.concatenate([latency.e2e, nan_failed]),
        NORMALIZED: np.concatenate([latency.normalized_latency, nan_failed]),
        MAX_TBT: np.concatenate([latency.max_tbt, nan_failed]),
        MIN_DECODE_DEADLINE: np.concatenate([minima, nan_failed]),
        LATENESS: [_lateness(r) for r in (*done, *failed)],
        GOOD: good,
    }
    for tier, accounting in measured.tiers.items():
        columns[tier_column(FLUIDITY, tier)] = np.concatenate([accounting.fluidity, nan_failed])
        columns[tier_column(MISSED, tier)] = np.concatenate([accounting.missed, nan_failed])
        columns[tier_column(DEADLINES, tier)] = np.concatenate([accounting.total, nan_failed])
    return build_records(tuple(policy.decode_tiers), columns)


def _lateness(result: ProbeResult) -> float:
    """How late the prober sent the request after its scheduled time; NaN when unknown."""
    if result.send_overhead_s is not None:
        return result.send_overhead_s
    if result.sent_at is None or result.scheduled_at is None:
        return math.nan
    return max(result.sent_at - result.scheduled_at, 0.0)
