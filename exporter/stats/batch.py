"""Per-token timings of many requests in one ragged array.

A request's timings are its ``intervals``: ``intervals[0]`` is the time to first token (arrival to
first token visible) and ``intervals[i]`` the gap between token ``i-1`` and token ``i``. A streamed chunk
that carries ``k`` tokens contributes its gap followed by ``k-1`` zero gaps.

``IntervalBatch`` keeps every request's intervals back to back in one float64 array with an offsets
array (request ``r`` is ``values[offsets[r]:offsets[r + 1]]``), the layout numpy works well with and the
one the probe store produces without copying. All metric functions that take many requests take one.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True, eq=False)
class IntervalBatch:
    """Validated intervals of many requests: flat ``values`` and ``offsets`` (``len == requests + 1``)."""

    values: FloatArray
    offsets: IntArray

    def __post_init__(self) -> None:
        _check_offsets(self.offsets, len(self.values))
        _check_intervals(self.values, self.offsets)
        self.values.flags.writeable = False
        self.offsets.flags.writeable = False

    @classmethod
    def from_sequences(cls, requests: Iterable[ArrayLike]) -> IntervalBatch:
        """Build from one sequence of intervals per request (lists, tuples or arrays)."""
        arrays = [np.asarray(r, dtype=np.float64).reshape(-1) for r in requests]
        lengths = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
        values = np.concatenate(arrays) if arrays else np.empty(0, dtype=np.float64)
        return cls(values, _offsets_from_lengths(lengths))

    @classmethod
    def from_flat(cls, values: ArrayLike, lengths: ArrayLike) -> IntervalBatch:
        """Build from all intervals back to back and the number of intervals of each request."""
        flat = np.array(values, dtype=np.float64).reshape(-1)
        return cls(flat, _offsets_from_lengths(np.asarray(lengths, dtype=np.int64).reshape(-1)))

    @classmethod
    def single(cls, intervals: ArrayLike) -> IntervalBatch:
        """A batch holding one request."""
        return cls.from_sequences([intervals])

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @cached_property
    def lengths(self) -> IntArray:
        """Number of tokens of each request."""
        return np.diff(self.offsets)

    @property
    def token_count(self) -> int:
        """Number of tokens over all requests."""
        return len(self.values)

    def request(self, index: int) -> FloatArray:
        """The intervals of request ``index`` (a read-only view)."""
        return self.values[self.offsets[index] : self.offsets[index + 1]]

    def take(self, indices: Sequence[int] | IntArray) -> IntervalBatch:
        """A new batch with the requests at ``indices``, in that order."""
        return IntervalBatch.from_sequences(self.request(int(i)) for i in indices)

    @cached_property
    def columns(self) -> ColumnLayout:
        """The transposed layout used by the vectorised deadline sweep (built once, then cached)."""
        return ColumnLayout.from_lengths(self.lengths).with_values(self.values)


@dataclass(frozen=True, eq=False)
class ColumnLayout:
    """A ragged array transposed: item ``i`` of every row long enough, contiguous.

    Rows are ranked longest first, so the rows that have an item at position ``i`` are exactly ranks
    ``0 .. active[i] - 1``, and their ``i``-th items sit in ``values[starts[i]:starts[i + 1]]`` in rank
    order. A sweep over positions then touches each item once with whole-array operations, with no
    padding however ragged the lengths are. ``order`` maps the transposed layout back to the flat one:
    ``transposed = flat[order]``.
    """

    order: IntArray
    starts: IntArray
    rank_to_request: IntArray
    lengths_by_rank: IntArray
    values: FloatArray

    @classmethod
    def from_lengths(cls, lengths: IntArray) -> ColumnLayout:
        rank_to_request = np.argsort(-lengths, kind="stable").astype(np.int64)
        lengths_by_rank = lengths[rank_to_request]
        longest = int(lengths_by_rank[0]) if len(lengths_by_rank) else 0
        # active[i] = number of rows with more than i items.
        active = np.searchsorted(-lengths_by_rank, -np.arange(longest), side="left").astype(np.int64)
        starts = _offsets_from_lengths(active)
        request_rank = np.empty_like(rank_to_request)
        request_rank[rank_to_request] = np.arange(len(rank_to_request), dtype=np.int64)
        offsets = _offsets_from_lengths(lengths)
        item_request = np.repeat(np.arange(len(lengths), dtype=np.int64), lengths)
        item_position = np.arange(int(offsets[-1]), dtype=np.int64) - offsets[item_request]
        order = np.empty(int(offsets[-1]), dtype=np.int64)
        order[starts[item_position] + request_rank[item_request]] = np.arange(len(order), dtype=np.int64)
        return cls(order, starts, rank_to_request, lengths_by_rank, np.empty(0))

    def with_values(self, flat: FloatArray) -> ColumnLayout:
        """The same layout carrying ``flat`` (in flat order) transposed."""
        return ColumnLayout(
            self.order, self.starts, self.rank_to_request, self.lengths_by_rank, flat[self.order]
        )

    @property
    def positions(self) -> int:
        """The length of the longest row."""
        return len(self.starts) - 1

    def column(self, position: int) -> FloatArray:
        """Values at ``position`` of the rows that have one, in rank order."""
        return self.values[self.starts[position] : self.starts[position + 1]]

    def column_of(self, transposed: NDArray[Any], position: int) -> NDArray[Any]:
        """Like ``column`` for another array already in transposed order."""
        return transposed[self.starts[position] : self.starts[position + 1]]


def intervals_from_stamps(start: float, stamps: Sequence[float], counts: Sequence[int]) -> list[float]:
    """Per-token intervals from the times chunks arrived: each chunk's gap since the previous one (the
    first since ``start``) followed by ``k - 1`` zero gaps for a chunk of ``k`` tokens. A stamp before the
    previous one (clock jitter) gives a zero gap, never a negative one."""
    if len(stamps) != len(counts):
        raise ValueError(f"{len(stamps)} stamps for {len(counts)} token counts")
    # One comprehension, and nothing more for the usual one token a chunk: a loop appending each gap
    # cost ~1 us a token, most of what evaluating a request costs (the observer evaluates every user
    # request); this is 4-5 times less, and less than numpy's call overhead below ~50 tokens.
    previous = itertools.chain((start,), stamps)  # one longer than stamps: zip stops with them
    gaps = [0.0 if b < a else b - a for a, b in zip(previous, stamps, strict=False)]
    if counts.count(1) == len(counts):
        return gaps
    out: list[float] = []
    for gap, count in zip(gaps, counts, strict=True):
        out.append(gap)
        if count > 1:
            out.extend([0.0] * (count - 1))
    return out


def _offsets_from_lengths(lengths: IntArray) -> IntArray:
    if np.any(lengths < 0):
        raise ValueError("request lengths must be >= 0")
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def _check_offsets(offsets: IntArray, value_count: int) -> None:
    if offsets.ndim != 1 or len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != value_count:
        raise ValueError(f"offsets must start at 0 and end at the number of intervals ({value_count})")
    if np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must be non-decreasing")


def _check_intervals(values: FloatArray, offsets: IntArray) -> None:
    # Fast path first: NaN fails `>= 0`, and a finite sum of non-negative values means all are finite.
    if bool((values >= 0.0).all()) and math.isfinite(float(values.sum())):
        return
    bad = np.flatnonzero(~(values >= 0.0) | ~np.isfinite(values))  # `~(x >= 0)` also catches NaN
    if len(bad) == 0:
        return
    first = int(bad[0])
    request = int(np.searchsorted(offsets, first, side="right")) - 1
    raise ValueError(
        f"interval {first - int(offsets[request])} of request {request} is {float(values[first])!r}; "
        "intervals must be finite and >= 0 seconds"
    )
