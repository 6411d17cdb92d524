"""Fluidity at given deadlines, exactly: the per-token loop (the definition), and two vectorised engines
that reproduce it bit for bit.

* ``loop_request``: Etalon's algorithm in its literal form, one request token by token. Every faster
  engine must reproduce it; they hand it the rare requests whose tokens land within rounding distance of
  a deadline, where only replaying the exact float operations in order can tell on-time from late.
* ``DeadlineSweep``: every request at once, one token position at a time, performing the very same
  float operations in the same order as the loop, vectorised over the requests that have a token at
  each position (see ``ColumnLayout``). Its cost is one small set of array operations per position,
  which pays off when many requests are evaluated together many times (a bisection with a slack cap
  runs it once per step; the minimum-deadline search asks it when many verdicts are uncertain).
* ``evaluate_by_points``: only tokens near a deadline are looked at one by one. Slack never falls on a
  token whose gap is below its decode deadline, so such a token is on time whatever came before, and a
  run of them only adds to the slack (up to the cap, when there is one). Only *points* need a decision:
  each request's first token and every token whose gap comes within the rounding tolerance of its
  decode deadline (about 1% of tokens in real streams). The engine sums each run of tokens between
  points at once (``np.add.reduceat``) and replays the Etalon recursion over the points only, all
  requests together, one point index at a time.

Exactness of the point engine. Summing a run at once rounds differently from the loop's one-by-one
additions, by at most a few units in the last place of the request's magnitude; the engine bounds that
error per request (``tolerance``) and, wherever a decision or a missed-deadline count sits within it,
hands the whole request to the literal loop. So the results always equal the loop's; the hand-over is
rare in measured data and common only in synthetic streams that put tokens exactly on their deadlines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, cast

import numpy as np
from numpy.typing import NDArray

from exporter.stats.accounting import Deadline, FluidityBatch, FluidityOptions, RequestFluidity, Variant
from exporter.stats.batch import ColumnLayout, FloatArray, IntArray, IntervalBatch

EPSILON = float(np.finfo(np.float64).eps)
# Far above the worst-case error of summing a request's terms in any order, so a decision that clears
# it is the same whatever the order of additions (error analysis: n terms, each error <= eps * sum).
TOLERANCE_FACTOR = 16.0


# -- the definition: the per-token loop -----------------------------------------------------------


def loop_request(
    intervals: Sequence[float], prefill_deadline: float, decode_deadline: float, options: FluidityOptions
) -> RequestFluidity:
    """Deadline accounting of one request by the per-token loop."""
    slack, missed, met = 0.0, 0, 0
    late_events, longest_stall, first_miss = 0, 0.0, None
    cap = options.slack_cap
    for index, interval in enumerate(intervals):
        if index == 0 and options.ignore_first_token:
            continue
        deadline = prefill_deadline if index == 0 else decode_deadline
        if interval <= deadline + slack:
            slack += deadline - interval
            if cap is not None:
                slack = min(slack, cap)
            met += 1
            continue
        if options.variant == "deadlines":
            missed += math.floor((interval - slack - deadline) / decode_deadline) + 1
        else:
            missed += 1
        slack = 0.0
        late_events += 1
        longest_stall = max(longest_stall, interval)
        first_miss = index if first_miss is None else first_miss
    return RequestFluidity(
        missed=missed,
        total=met + missed,
        late_events=late_events,
        longest_stall=longest_stall,
        first_miss_index=first_miss,
        tokens=max(len(intervals) - int(options.ignore_first_token), 0),
    )


# -- the sweep: every request, one token position at a time ---------------------------------------


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


class _Column(NamedTuple):
    """One token position of a sweep: its intervals, the deadlines and decode deadlines of the requests
    there, and the slack they banked before it (a tuple: built once per position with late tokens)."""

    position: int
    interval: FloatArray
    deadline: Deadline
    decode: Deadline
    slack: FloatArray


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
        if late_count:
            column = _Column(position, interval, own_deadline, _head(decode, active), own_slack)
            if late_count > active * self.DENSE_LATE_SHARE:
                self._record_late_dense(column, late, c)
            else:
                self._record_late_sparse(column, np.flatnonzero(late), c)
        np.subtract(own_deadline, interval, out=scratch)
        own_slack += scratch
        if self.options.slack_cap is not None:
            np.minimum(own_slack, self.options.slack_cap, out=own_slack)
        if late_count:
            np.logical_not(late, out=late)
            own_slack *= late  # slack restarts at 0 after a miss

    def _record_late_sparse(self, column: _Column, rows: IntArray, c: SweepCounts) -> None:
        position, interval, deadline, decode, slack = column
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

    def _record_late_dense(self, column: _Column, late: NDArray[np.bool_], c: SweepCounts) -> None:
        position, interval, deadline, decode, slack = column
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


# -- the point engine: only the tokens that can be late -------------------------------------------


def evaluate_by_points(
    batch: IntervalBatch, prefill: FloatArray, decode: FloatArray, options: FluidityOptions
) -> FluidityBatch:
    """Deadline accounting of every request; ``prefill``/``decode`` hold one deadline per request."""
    tolerance = _tolerance(batch, prefill, decode)
    points = _Points.find(batch, decode, tolerance, prefill, options)
    result, uncertain = _PointSweep(points, options).run(len(batch))
    _finish_counts(result, batch, options)
    for request in np.flatnonzero(uncertain):
        intervals = batch.request(int(request)).tolist()
        exact = loop_request(intervals, float(prefill[request]), float(decode[request]), options)
        result.set_request(int(request), exact)
    return replace(result, exact_fallbacks=int(np.count_nonzero(uncertain)))


def _tolerance(batch: IntervalBatch, prefill: FloatArray, decode: FloatArray) -> FloatArray:
    """Per request, a bound on how far two orders of summing its terms can drift apart."""
    sums = np.zeros(len(batch))
    nonempty = batch.lengths > 0
    if nonempty.any():
        sums[nonempty] = np.add.reduceat(batch.values, batch.offsets[:-1][nonempty])
    magnitude = sums + batch.lengths * decode + prefill
    return TOLERANCE_FACTOR * EPSILON * (batch.lengths + 8) * magnitude


@dataclass(frozen=True, eq=False)
class _Points:
    """Decision points in transposed order (point ``k`` of every request that has one, contiguous).

    Per point: its interval and deadline, the gain in slack of the run of tokens after it (up to the
    next point), its token index, and its request's decode deadline and tolerance.
    """

    layout: ColumnLayout
    interval: FloatArray
    deadline: FloatArray
    decode: FloatArray
    run_gain: FloatArray
    tolerance: FloatArray
    token_index: IntArray

    @classmethod
    def find(
        cls,
        batch: IntervalBatch,
        decode: FloatArray,
        tolerance: FloatArray,
        prefill: FloatArray,
        options: FluidityOptions,
    ) -> _Points:
        t = batch.values
        starts = batch.offsets[:-1][batch.lengths > 0]
        near = _near_deadline(batch, decode, tolerance)
        points = _sorted_union(starts, near)
        request = np.searchsorted(batch.offsets, points, side="right") - 1
        first = points == batch.offsets[request]
        interval = t[points]
        run_length = np.diff(points, append=len(t)) - 1
        run_sum = np.add.reduceat(t, points) - interval if len(points) else np.zeros(0)
        run_gain = run_length * decode[request] - run_sum
        deadline = np.where(first, prefill[request], decode[request])
        if options.ignore_first_token:  # the first token then has no deadline and banks nothing
            interval = np.where(first, 0.0, interval)
            deadline = np.where(first, 0.0, deadline)
        layout = ColumnLayout.from_lengths(np.bincount(request, minlength=len(batch)).astype(np.int64))
        order = layout.order
        return cls(
            layout=layout,
            interval=interval[order],
            deadline=deadline[order],
            decode=decode[request][order],
            run_gain=run_gain[order],
            tolerance=tolerance[request][order],
            token_index=(points - batch.offsets[request])[order],
        )


def _sorted_union(first: IntArray, second: IntArray) -> IntArray:
    merged = np.sort(np.concatenate([first, second]))
    keep = np.ones(len(merged), dtype=np.bool_)
    np.not_equal(merged[1:], merged[:-1], out=keep[1:])
    return merged[keep]


def _near_deadline(batch: IntervalBatch, decode: FloatArray, tolerance: FloatArray) -> IntArray:
    """Tokens whose gap exceeds their decode deadline less the tolerance: the only ones that can be late."""
    if len(decode) and np.all(decode == decode[0]):
        return np.flatnonzero(batch.values > decode[0] - tolerance.max())
    per_token = np.repeat(decode - tolerance, batch.lengths)
    return np.flatnonzero(batch.values > per_token)


class _PointColumn(NamedTuple):
    """Point ``position`` of every request that has one: intervals, deadlines, decode deadlines, the
    slack banked before it and the rounding tolerances."""

    position: int
    t: FloatArray
    deadline: FloatArray
    decode: FloatArray
    before: FloatArray
    tolerance: FloatArray


class _PointSweep:
    """The Etalon recursion over decision points, every request at once, one point index at a time."""

    def __init__(self, points: _Points, options: FluidityOptions) -> None:
        self.points = points
        self.options = options

    def run(self, requests: int) -> tuple[FluidityBatch, NDArray[np.bool_]]:
        layout = self.points.layout
        by_rank = FluidityBatch.empty(requests)
        uncertain = np.zeros(requests, dtype=np.bool_)
        slack = np.zeros(requests)
        for position in range(layout.positions):
            self._step(position, slack, by_rank, uncertain)
        return _to_request_order(by_rank, uncertain, layout.rank_to_request)

    def _column(self, values: FloatArray, position: int) -> FloatArray:
        return self.points.layout.column_of(values, position)

    def _step(self, position: int, slack: FloatArray, c: FluidityBatch, uncertain: NDArray[np.bool_]) -> None:
        p, col = self.points, self._column
        t, deadline, decode = col(p.interval, position), col(p.deadline, position), col(p.decode, position)
        tolerance = col(p.tolerance, position)
        active = len(t)
        before = slack[:active]  # slack banked before this point (the run after the previous one added)
        margin = deadline + before - t
        late = margin < 0
        # The first point of a request starts from zero slack, exactly as the loop does: no rounding.
        if position > 0:
            uncertain[:active] |= np.abs(margin) <= 2 * tolerance
        if late.any():
            self._record_late(
                _PointColumn(position, t, deadline, decode, before, tolerance), late, c, uncertain
            )
        cap = self.options.slack_cap
        at_point = np.where(late, 0.0, before + (deadline - t))
        if cap is not None:
            np.minimum(at_point, cap, out=at_point)
        # Every token of the run after the point adds to the slack, so the cap can only bind at its end.
        after = at_point + col(p.run_gain, position)
        slack[:active] = after if cap is None else np.minimum(after, cap)

    def _record_late(
        self, column: _PointColumn, late: NDArray[np.bool_], c: FluidityBatch, uncertain: NDArray[np.bool_]
    ) -> None:
        position, t, deadline, decode, before, tolerance = column
        rows = np.flatnonzero(late)
        if self.options.variant == "deadlines":
            ratio = (t[rows] - before[rows] - deadline[rows]) / decode[rows]
            c.missed[rows] += np.floor(ratio) + 1.0
            if position > 0:  # a count whose ratio sits on a whole number could round either way
                distance = np.abs(ratio - np.round(ratio))
                fuzzy = distance <= 4 * tolerance[rows] / decode[rows] + 8 * EPSILON * (np.abs(ratio) + 1)
                uncertain[rows[fuzzy]] = True
        else:
            c.missed[rows] += 1.0
        c.late_events[rows] += 1
        c.longest_stall[rows] = np.maximum(c.longest_stall[rows], t[rows])
        first = c.first_miss_index[rows]
        token = self.points.layout.column_of(self.points.token_index, position)[rows]
        c.first_miss_index[rows] = np.where(first < 0, token, first)


def _to_request_order(
    by_rank: FluidityBatch, uncertain: NDArray[np.bool_], rank_to_request: IntArray
) -> tuple[FluidityBatch, NDArray[np.bool_]]:
    out = FluidityBatch.empty(len(by_rank))
    for name in ("missed", "late_events", "longest_stall", "first_miss_index"):
        getattr(out, name)[rank_to_request] = getattr(by_rank, name)
    flags = np.empty_like(uncertain)
    flags[rank_to_request] = uncertain
    return out, flags


def _finish_counts(result: FluidityBatch, batch: IntervalBatch, options: FluidityOptions) -> None:
    """Tokens considered, and totals: every considered token meets a deadline or is late."""
    result.tokens[:] = np.maximum(batch.lengths - int(options.ignore_first_token), 0)
    met = result.tokens - result.late_events
    result.total[:] = met + (result.missed if options.variant == "deadlines" else result.late_events)
