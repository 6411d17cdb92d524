"""Exact step verdicts where the deadline search cannot settle one cheaply: the reference loop, or a sweep.

Apart from ``deadline_verdicts`` because it is the other way to the same answer: where rounding could
change a verdict of the prefix form, the step asks one of the exact engines, the per-token loop
(``deadline_loop``) for a few requests or one vectorised sweep (``deadline_sweep``) for many.
"""

from __future__ import annotations

import numpy as np

from exporter.stats.accounting import FluidityOptions, Variant
from exporter.stats.batch import FloatArray, IntArray, IntervalBatch
from exporter.stats.deadline_arrays import BoolArray, sub_batch
from exporter.stats.deadline_loop import loop_request
from exporter.stats.deadline_sweep import DeadlineSweep

# Up to this many uncertain requests in a step are replayed one by one with the per-token loop; more
# share one vectorised sweep (whose cost is per token position, whatever the number of requests).
LOOP_MAX_UNCERTAIN = 32


def exact_passes(
    batch: IntervalBatch, rows: IntArray, deadline: FloatArray, target: float, variant: Variant
) -> BoolArray:
    """Whether each of ``rows`` reaches ``target`` at its ``deadline`` (decode-only fluidity), decided
    by the exact engines."""
    options = FluidityOptions(ignore_first_token=True, variant=variant)
    if len(rows) <= LOOP_MAX_UNCERTAIN:
        pairs = zip(rows.tolist(), deadline.tolist(), strict=True)
        return np.array([_loop_passes(batch, r, d, target, options) for r, d in pairs], dtype=np.bool_)
    layout = sub_batch(batch, rows).columns
    by_rank = deadline[layout.rank_to_request]
    fluidity = DeadlineSweep(layout, options, with_stall_stats=False).run(by_rank, by_rank).fluidity
    out = np.empty(len(rows), dtype=np.bool_)
    out[layout.rank_to_request] = fluidity >= target
    return out


def _loop_passes(
    batch: IntervalBatch, row: int, deadline: float, target: float, options: FluidityOptions
) -> bool:
    try:
        return loop_request(batch.request(row).tolist(), deadline, deadline, options).fluidity >= target
    except OverflowError:  # a stall spans infinitely many of these deadlines: fluidity 0
        return False
