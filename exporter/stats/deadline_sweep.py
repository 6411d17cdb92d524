"""The deadline sweep: every request at once, one token position at a time, exactly as the loop.

It performs the very same float operations in the same order as the per-token loop, vectorised over
the requests that have a token at each position (see ``ColumnLayout``), so its decisions are the loop's
bit for bit. Its cost is one small set of array operations per position, which pays off when many
requests are evaluated together many times: the minimum-deadline bisection runs it once per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from exporter.stats.accounting import Deadline, FluidityBatch, FluidityOptions, Variant
from exporter.stats.batch import ColumnLayout, FloatArray, IntArray


@dataclass(eq=False)
class SweepCounts:
    """Accumulators of one sweep, indexed by rank."""

    missed: FloatArray
    late_events: IntArray
    longest_stall: FloatArray
    first_miss_index: IntArray
    considered: IntArray
    variant: Variant

    @property
    def total(self) -> FloatArray:
        met = self.considered - self.late_events
        return met + (self.missed if self.variant == "deadlines" else self.late_events)

    @property
    def fluidity(self) -> FloatArray:
        total = self.total
        with np.errstate(invalid="ignore", divide="ignore"):
            return cast(FloatArray, np.where(total > 0, 1.0 - self.missed / total, 1.0))

    def in_request_order(self, rank_to_request: IntArray) -> FluidityBatch:
        def reorder(by_rank: NDArray[Any]) -> NDArray[Any]:
            out = np.empty_like(by_rank)
            out[rank_to_request] = by_rank
            return out

        return FluidityBatch(
            missed=reorder(self.missed),
            total=reorder(self.total),
            late_events=reorder(self.late_events),
            longest_stall=reorder(self.longest_stall),
            first_miss_index=reorder(self.first_miss_index),
            tokens=reorder(self.considered),
        )


class DeadlineSweep:
    """One pass over token positions, every request at once, replaying the per-token loop exactly.

    Each step touches one position of every request still running. Late tokens are rare in healthy
    streams, so they are handled on their indices; when many are late at once (a bisection step below
    the answer) whole-array masked arithmetic is cheaper than gathering and scattering.
    """

    DENSE_LATE_SHARE = 1 / 16

    def __init__(self, layout: ColumnLayout, options: FluidityOptions, *, with_stall_stats: bool) -> None:
        self.layout = layout
        self.options = options
        self.with_stall_stats = with_stall_stats
        self.first_position = 1 if options.ignore_first_token else 0
        self.considered = np.maximum(layout.lengths_by_rank - self.first_position, 0)
        rows = len(layout.rank_to_request)
        self.scratch = np.empty(rows, dtype=np.float64)
        self.late_mask = np.empty(rows, dtype=np.bool_)

    def run(self, prefill: Deadline, decode: Deadline) -> SweepCounts:
        rows = len(self.layout.rank_to_request)
        counts = SweepCounts(
            missed=np.zeros(rows),
            late_events=np.zeros(rows, dtype=np.int64),
            longest_stall=np.zeros(rows),
            first_miss_index=np.full(rows, -1, dtype=np.int64),
            considered=self.considered,
            variant=self.options.variant,
        )
        slack = np.zeros(rows)
        for position in range(self.first_position, self.layout.positions):
            deadline = prefill if position == 0 else decode
            self._step(position, deadline, decode, slack, counts)
        return counts

    def _step(
        self, position: int, deadline: Deadline, decode: Deadline, slack: FloatArray, c: SweepCounts
    ) -> None:
        interval = self.layout.column(position)
        active = len(interval)
        own_deadline = _head(deadline, active)
        own_slack = slack[:active]
        late = self.late_mask[:active]
        scratch = self.scratch[:active]
        np.add(own_deadline, own_slack, out=scratch)
        np.greater(interval, scratch, out=late)
        late_count = int(np.count_nonzero(late))
        # Misses are computed from the slack banked *before* this token, as the loop does.
        if late_count > active * self.DENSE_LATE_SHARE:
            self._record_late_dense(
                position, late, interval, own_deadline, _head(decode, active), own_slack, c
            )
        elif late_count:
            rows = np.flatnonzero(late)
            self._record_late_sparse(
                position, rows, interval, own_deadline, _head(decode, active), own_slack, c
            )
        np.subtract(own_deadline, interval, out=scratch)
        own_slack += scratch
        if self.options.slack_cap is not None:
            np.minimum(own_slack, self.options.slack_cap, out=own_slack)
        if late_count:
            np.logical_not(late, out=late)
            own_slack *= late  # slack restarts at 0 after a miss

    def _record_late_sparse(
        self,
        position: int,
        rows: IntArray,
        interval: FloatArray,
        deadline: Deadline,
        decode: Deadline,
        slack: FloatArray,
        c: SweepCounts,
    ) -> None:
        t = interval[rows]
        if self.options.variant == "deadlines":
            c.missed[rows] += np.floor((t - slack[rows] - _pick(deadline, rows)) / _pick(decode, rows)) + 1.0
        else:
            c.missed[rows] += 1.0
        c.late_events[rows] += 1
        if self.with_stall_stats:
            c.longest_stall[rows] = np.maximum(c.longest_stall[rows], t)
            first = c.first_miss_index[rows]
            c.first_miss_index[rows] = np.where(first < 0, position, first)

    def _record_late_dense(
        self,
        position: int,
        late: NDArray[np.bool_],
        interval: FloatArray,
        deadline: Deadline,
        decode: Deadline,
        slack: FloatArray,
        c: SweepCounts,
    ) -> None:
        active = len(interval)
        if self.options.variant == "deadlines":
            misses = self.scratch[:active]
            np.subtract(interval, slack, out=misses)
            misses -= deadline
            misses /= decode
            np.floor(misses, out=misses)
            misses += 1.0
            misses *= late
            c.missed[:active] += misses
        else:
            c.missed[:active] += late
        c.late_events[:active] += late
        if self.with_stall_stats:
            np.maximum(c.longest_stall[:active], np.where(late, interval, 0.0), out=c.longest_stall[:active])
            first = c.first_miss_index[:active]
            first[late & (first < 0)] = position


def _head(deadline: Deadline, count: int) -> Deadline:
    return deadline if isinstance(deadline, float) else deadline[:count]


def _pick(deadline: Deadline, rows: IntArray) -> Deadline:
    return deadline if isinstance(deadline, float) else deadline[rows]
