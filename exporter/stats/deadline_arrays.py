"""The array work of the deadline search (``deadline_search``): the loop's slack replayed over runs of
tokens, running decode sums, per-segment scans and sub-batches. Pure numpy, each exact (sums accumulate
in the loop's order; minima and indexes do not round)."""

from __future__ import annotations

from typing import cast

import numpy as np
from numpy.typing import NDArray

from exporter.stats.batch import FloatArray, IntArray, IntervalBatch

BoolArray = NDArray[np.bool_]


class Replays:
    """The loop's slack over runs of tokens, ``s = 0; s += D - t`` in order, for many runs at once.

    Runs are laid out as padded columns (grouped by length class, so padding at most doubles the work)
    and summed with ``np.add.accumulate`` down the columns: each column is added sequentially, so it
    rounds exactly as the loop, and each step adds one contiguous row across all runs. The layout is
    kept while the runs stay the same (the last dozen steps of a search replay the same runs at ever
    closer deadlines).
    """

    def __init__(self, values: FloatArray) -> None:
        self.values = values
        self.key: tuple[IntArray, IntArray] | None = None
        self.blocks: list[tuple[IntArray, FloatArray, FloatArray]] = []

    def slack(self, first: IntArray, stop: IntArray, deadline: FloatArray) -> FloatArray:
        if self.key is None or not (np.array_equal(self.key[0], first) and np.array_equal(self.key[1], stop)):
            self.key, self.blocks = (first, stop), self._layout(first, stop)
        out = np.zeros(len(first))
        for rows, gaps, inside in self.blocks:
            terms = deadline[rows] - gaps
            terms *= inside  # padding adds (+-)0.0, which leaves every float unchanged
            np.add.accumulate(terms, axis=0, out=terms)
            out[rows] = terms[-1]
        return out

    def _layout(self, first: IntArray, stop: IntArray) -> list[tuple[IntArray, FloatArray, FloatArray]]:
        lengths = stop - first
        length_class = np.ceil(np.log2(np.maximum(lengths, 1))).astype(np.int64)
        blocks = []
        for group in np.unique(length_class[lengths > 0]):
            rows = np.flatnonzero((length_class == group) & (lengths > 0))
            step = np.arange(int(lengths[rows].max()), dtype=np.int64)[:, None]
            inside = step < lengths[rows]
            gaps = self.values[np.where(inside, first[rows] + step, 0)]
            blocks.append((rows, gaps, inside.astype(np.float64)))
        return blocks


def sub_batch(batch: IntervalBatch, rows: IntArray) -> IntervalBatch:
    lengths = batch.lengths[rows]
    starts = np.repeat(batch.offsets[rows], lengths)
    within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return IntervalBatch.from_flat(batch.values[starts + within], lengths)


def running_decode_sums(batch: IntervalBatch) -> FloatArray:
    """Per token, its request's decode gaps summed up to it (0 at the first token), one at a time as
    the loop adds: a row-wise accumulate when all requests are as long, else position by position."""
    lengths = batch.lengths
    sums = np.zeros(len(batch.values))
    if len(lengths) == 0 or len(sums) == 0:
        return sums
    if np.all(lengths == lengths[0]):
        rows = batch.values.reshape(len(lengths), -1).copy()
        rows[:, 0] = 0.0
        return np.add.accumulate(rows, axis=1).reshape(-1)
    layout = batch.columns
    transposed = np.zeros(len(layout.values))
    previous = layout.column_of(transposed, 0)
    for position in range(1, layout.positions):
        current = layout.column_of(transposed, position)
        np.add(previous[: len(current)], layout.column(position), out=current)
        previous = current
    sums[layout.order] = transposed
    return sums


def per_slot(slot: IntArray, weights: FloatArray, size: int) -> FloatArray:
    """Sums of ``weights`` per slot (exact for whole counts below 2**53)."""
    return cast(FloatArray, np.bincount(slot, weights=weights, minlength=size))


def previous_minimum(values: FloatArray, segment: IntArray) -> FloatArray:
    """For each item, the minimum of the items before it in its segment (``inf`` for the first).

    ``segment`` is non-decreasing. A doubling scan (log2 of the longest segment passes): exact, since a
    minimum never rounds, and free of the padding a 2-D layout needs for ragged segments.
    """
    out = np.full(len(values), np.inf)
    if len(values) < 2:
        return out
    out[1:] = np.where(segment[1:] == segment[:-1], values[:-1], np.inf)
    shift = 1
    while shift < len(values):
        same = segment[shift:] == segment[:-shift]
        if not same.any():
            break
        np.minimum(out[shift:], np.where(same, out[:-shift], np.inf), out=out[shift:])
        shift *= 2
    return out


def last_before(flags: BoolArray, segment: IntArray) -> IntArray:
    """For each item, the index of the last flagged item before it in its segment (-1 if none)."""
    last = np.full(len(flags), -1, dtype=np.int64)
    if len(flags) > 1:
        index = np.arange(len(flags), dtype=np.int64)
        running = np.maximum.accumulate(np.where(flags, index, -1))[:-1]
        last[1:] = np.where((running >= 0) & (segment[np.maximum(running, 0)] == segment[1:]), running, -1)
    return last


def longest_decode_gap(batch: IntervalBatch) -> FloatArray:
    """Per request, its longest decode gap (the first token's gap is prefill, not decode)."""
    longest = np.zeros(len(batch))
    has_tokens = batch.lengths > 0
    if has_tokens.any():
        decode = batch.values.copy()
        decode[batch.offsets[:-1][has_tokens]] = 0.0  # the first token has no decode deadline
        longest[has_tokens] = np.maximum.reduceat(decode, batch.offsets[:-1][has_tokens])
    return longest
