"""The fast fluidity engine: only tokens near a deadline are looked at one by one.

Slack never falls on a token whose gap is below its decode deadline, so such a token is on time
whatever came before, and a run of them only adds to the slack (up to the cap, when there is one).
Only *points* need a decision: each request's first token and every token whose gap comes within the
rounding tolerance of its decode deadline (about 1% of tokens in real streams). The engine sums each
run of tokens between points at once (``np.add.reduceat``) and replays the Etalon recursion over the
points only, all requests together, one point index at a time.

Exactness. Summing a run at once rounds differently from the loop's one-by-one additions, by at most a
few units in the last place of the request's magnitude; the engine bounds that error per request
(``tolerance``) and, wherever a decision or a missed-deadline count sits within it, hands the whole
request to the literal loop. So the results always equal the loop's; the hand-over is rare in measured
data and common only in synthetic streams that put tokens exactly on their deadlines.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from exporter.stats.accounting import FluidityBatch, FluidityOptions
from exporter.stats.batch import ColumnLayout, FloatArray, IntArray, IntervalBatch
from exporter.stats.deadline_loop import loop_request

EPSILON = float(np.finfo(np.float64).eps)
# Far above the worst-case error of summing a request's terms in any order, so a decision that clears
# it is the same whatever the order of additions (error analysis: n terms, each error <= eps * sum).
TOLERANCE_FACTOR = 16.0


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
            self._record_late(position, late, t, deadline, decode, before, tolerance, c, uncertain)
        cap = self.options.slack_cap
        at_point = np.where(late, 0.0, before + (deadline - t))
        if cap is not None:
            np.minimum(at_point, cap, out=at_point)
        # Every token of the run after the point adds to the slack, so the cap can only bind at its end.
        after = at_point + col(p.run_gain, position)
        slack[:active] = after if cap is None else np.minimum(after, cap)

    def _record_late(
        self,
        position: int,
        late: NDArray[np.bool_],
        t: FloatArray,
        deadline: FloatArray,
        decode: FloatArray,
        before: FloatArray,
        tolerance: FloatArray,
        c: FluidityBatch,
        uncertain: NDArray[np.bool_],
    ) -> None:
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
