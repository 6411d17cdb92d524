"""One step of the deadline search decided for many requests at once (``Verdicts``), from the late tokens.

Apart from the bisection (``deadline_search``), which only asks "does request r reach the target at
``D``?": this is how the answer comes out of Lindley's prefix form of the slack, which tokens stay
candidates as the brackets narrow, when a request is frozen, and which decisions are replayed on the
loop's own slack or handed to the exact engines (``deadline_exact``). The module docstring of
``deadline_search`` gives the reasoning and the exactness argument.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from exporter.stats.accounting import Variant
from exporter.stats.batch import FloatArray, IntArray, IntervalBatch
from exporter.stats.deadline_arrays import (
    BoolArray,
    Replays,
    last_before,
    per_slot,
    previous_minimum,
    running_decode_sums,
)
from exporter.stats.deadline_exact import exact_passes
from exporter.stats.deadline_points import EPSILON, TOLERANCE_FACTOR

# Relative margin of the lower bound on misses: far above its roundings (about m * eps), far below
# anything that matters to the bracket.
BOUND_MARGIN = 1e-9


@dataclass(frozen=True, eq=False)
class _Points:
    """A step's points, ordered by request then token: the token (flat index), the request's slot in
    the step, its deadline and tolerance, the token's gap and the slack before it (prefix form)."""

    token: IntArray
    slot: IntArray
    deadline: FloatArray
    tol: FloatArray
    gap: FloatArray
    slack: FloatArray


@dataclass(frozen=True, eq=False)
class _Tally:
    """One step's outcome per point (margin, miss ratio, late 1/0, missed) and per request (verdict,
    uncertain), with the replayed points and the last certain reset before each."""

    margin: FloatArray
    ratio: FloatArray
    verdict: BoolArray
    uncertain: BoolArray
    late: FloatArray
    missed: FloatArray
    replay: IntArray
    last_reset: IntArray


@dataclass(frozen=True, eq=False)
class _Fixed:
    """Per request, once frozen: the counts of every point but one, and that point's token and run."""

    late: FloatArray
    missed: FloatArray
    token: IntArray
    first: IntArray

    @classmethod
    def empty(cls, size: int) -> _Fixed:
        return cls(np.zeros(size), np.zeros(size), np.zeros(size, np.int64), np.zeros(size, np.int64))

    def set(
        self, rows: IntArray, late: FloatArray, missed: FloatArray, token: IntArray, first: IntArray
    ) -> None:
        self.late[rows], self.missed[rows], self.token[rows], self.first[rows] = late, missed, token, first


class Verdicts:
    """Decides ``fluidity(D) >= target`` for many requests at once, each at its own ``D``."""

    def __init__(self, batch: IntervalBatch, target: float, variant: Variant) -> None:
        self.batch, self.target, self.variant = batch, target, variant
        self.sums = running_decode_sums(batch)
        self.decode_count = np.maximum(batch.lengths - 1, 0).astype(np.float64)
        self.decode_sum = np.zeros(len(batch))
        last = batch.offsets[1:] - 1
        self.decode_sum[batch.lengths > 0] = self.sums[last[batch.lengths > 0]]
        self.fail_below = self._fail_below()
        self._candidates_above(self.fail_below - self.tolerance(np.arange(len(batch)), self.fail_below))
        self.replays, self.frozen_replays = Replays(batch.values), Replays(batch.values)
        self.exact_verdicts = 0
        self.frozen = np.zeros(len(batch), dtype=np.bool_)
        self.fixed = _Fixed.empty(len(batch))

    def tolerance(self, rows: IntArray, deadline: FloatArray) -> FloatArray:
        """A bound on how far the prefix form and the loop can drift apart (see ``deadline_points``)."""
        count = self.decode_count[rows]
        return TOLERANCE_FACTOR * EPSILON * (count + 8) * (self.decode_sum[rows] + count * deadline)

    def _fail_below(self) -> FloatArray:
        """Per request, a deadline below which its fluidity is surely under the target.

        Summed over late tokens, the lateness ``t - slack - D`` is the slack left at the end less the
        sum of ``D - t``: at least ``T - m*D`` for ``m`` decode tokens with gaps summing to ``T``. Each
        late token misses at least its lateness over ``D``, so ``missed >= T/D - m`` and ``fluidity <=
        m / (m + missed) <= m*D / T``, under ``F`` for ``D < T / (m/F + 1)`` (the +1 and the margin
        cover rounding). The "tokens" variant counts a stall once and has no such bound.
        """
        if self.variant != "deadlines":
            return np.zeros(len(self.batch))
        m = np.maximum(self.decode_count, 1.0)
        bound = self.decode_sum / (m / self.target + 1.0) * (1.0 - BOUND_MARGIN)
        return np.where(np.isfinite(bound), bound, 0.0)  # gaps whose sum overflows: no shortcut

    def _candidates_above(self, floor: FloatArray) -> None:
        """Candidates: decode tokens that can be points at some deadline still to be asked."""
        request = np.repeat(np.arange(len(self.batch), dtype=np.int64), self.batch.lengths)
        above = self.batch.values > floor[request]
        above[self.batch.offsets[:-1][self.batch.lengths > 0]] = False  # the first token: no deadline
        # Parallel arrays, narrowed together: a step reads them in order instead of gathering at random
        # from arrays as long as the batch.
        self.cand_token = np.flatnonzero(above)
        self.cand_request = request[self.cand_token]
        self.cand_gap = self.batch.values[self.cand_token]
        self.cand_index = (self.cand_token - self.batch.offsets[self.cand_request]).astype(np.float64)
        self.cand_sum_at = self.sums[self.cand_token]
        self.cand_sum_before = self.sums[self.cand_token - 1]
        self.cand_open = len(self.batch)

    def forget_closed(self, open_rows: IntArray) -> None:
        """Drop the candidates of finished requests once a quarter of them are finished."""
        if len(open_rows) > 0.75 * self.cand_open:
            return
        is_open = np.zeros(len(self.batch), dtype=np.bool_)
        is_open[open_rows] = True
        self._keep(is_open[self.cand_request])
        self.cand_open = len(open_rows)

    def _keep(self, keep: BoolArray) -> None:
        self.cand_token = self.cand_token[keep]
        self.cand_request = self.cand_request[keep]
        self.cand_gap = self.cand_gap[keep]
        self.cand_index = self.cand_index[keep]
        self.cand_sum_at = self.cand_sum_at[keep]
        self.cand_sum_before = self.cand_sum_before[keep]

    def passes(
        self, rows: IntArray, deadline: FloatArray, bracket: tuple[FloatArray, FloatArray]
    ) -> BoolArray:
        """The loop's verdict for each of ``rows`` at its deadline, inside its bracket ``(low, high)``.

        A failing request's bracket moves up to ``deadline``. Slack never falls as the deadline grows
        (Lindley's recursion is monotone in ``D``), so a token on time here by more than any rounding
        up to ``ceiling`` stays on time for the rest of the search: it is no longer a candidate.
        """
        slot = np.full(len(self.batch), -1, dtype=np.int64)
        slot[rows] = np.arange(len(rows), dtype=np.int64)
        tol = self.tolerance(rows, deadline)
        low, ceiling = bracket
        # Where the bracket is narrow enough to try freezing, tokens that could become points inside
        # it are points now, so that their steadiness is checked too (extra points change no result).
        band = 16 * self.tolerance(rows, ceiling) + 4 * (self.decode_count[rows] + 1.0) * (ceiling - low)
        band = np.where(band < 0.1 * deadline, band, 0.0)
        cand_slot = slot[self.cand_request]
        threshold = np.append(deadline - tol - band, np.inf)  # slot -1 (not asked): never a point
        near = np.flatnonzero(self.cand_gap > threshold[cand_slot])
        points = self._points(near, cand_slot[near], deadline, tol)
        tally = self._tally(rows, points)
        margin, verdict, uncertain = tally.margin, tally.verdict, tally.uncertain
        self._freeze(rows, points, tally, band, bracket)
        if uncertain.any():
            which = np.flatnonzero(uncertain)
            verdict[which] = self._exact(rows[which], deadline[which])
        settled_fail = np.append(~verdict & ~uncertain, False)
        on_time = 4 * self.tolerance(rows, ceiling) + tol
        drop = settled_fail[cand_slot]  # every candidate of a failing request but its late points
        drop[near[(margin <= on_time[points.slot]) | ~settled_fail[points.slot]]] = False
        if drop.any():
            self._keep(~drop)
        return verdict

    def _points(self, near: IntArray, point_slot: IntArray, deadline: FloatArray, tol: FloatArray) -> _Points:
        """The step's points with the slack before each; the minimum runs over points only, since only
        they can be late."""
        d, k = deadline[point_slot], self.cand_index[near]
        with np.errstate(over="ignore", invalid="ignore"):  # overflowing sums: see _tally
            prefix_at = k * d - self.cand_sum_at[near]
            lowest = np.minimum(previous_minimum(prefix_at, point_slot), 0.0)
            slack = (k - 1.0) * d - self.cand_sum_before[near] - lowest
        return _Points(self.cand_token[near], point_slot, d, tol[point_slot], self.cand_gap[near], slack)

    def _tally(self, rows: IntArray, p: _Points) -> _Tally:
        """Margins of the points, the verdict, and whether rounding could still change it.

        A decision within rounding distance is a *critical* point (on-time test) or a *fuzzy* one (a
        miss count on a whole number); both are settled by ``_replay``. A critical decision moves later
        slack by at most its tiny margin (hence the wider 4x band that makes a point critical) but may
        or may not reset it: a request with two critical points, or a replayed point after a critical
        one with no certain reset between, is left uncertain.
        """
        size = len(rows)
        with np.errstate(invalid="ignore"):
            margin = (p.deadline + p.slack) - p.gap
        critical = np.abs(margin) <= 4 * p.tol
        certain_late = (margin < 0) & ~critical
        late = certain_late.astype(np.float64)
        missed, fuzzy, ratio = self._misses(p, certain_late)
        replay = np.flatnonzero(critical | fuzzy)
        last_reset = last_before(certain_late, p.slot)
        tangled = np.zeros(len(replay), dtype=np.bool_)
        if critical.any():
            tangled = last_before(critical, p.slot)[replay] > last_reset[replay]
        if len(replay):
            late[replay], missed[replay] = self._replay(p, last_reset[replay], replay, self.replays)
        uncertain = np.bincount(p.slot[critical], minlength=size) > 1
        uncertain |= np.bincount(p.slot[~np.isfinite(margin)], minlength=size) > 0  # sums that overflowed
        uncertain |= np.bincount(p.slot[replay[tangled]], minlength=size) > 0
        late_count, missed_count = per_slot(p.slot, late, size), per_slot(p.slot, missed, size)
        met = self.decode_count[rows] - late_count
        verdict = self._fluidity_passes(met, missed_count, late_count)
        return _Tally(margin, ratio, verdict, uncertain, late, missed, replay, last_reset)

    def _misses(self, p: _Points, late: BoolArray) -> tuple[FloatArray, BoolArray, FloatArray]:
        """Missed deadlines of each certainly late point, which counts rounding could move by one, and
        the ratio each count is the floor of (NaN where there is none)."""
        missed = np.zeros(len(p.gap))
        fuzzy = np.zeros(len(p.gap), dtype=np.bool_)
        ratios = np.full(len(p.gap), np.nan)
        if self.variant == "tokens":
            missed[late] = 1.0
            return missed, fuzzy, ratios
        d, tol = p.deadline[late], p.tol[late]
        with np.errstate(over="ignore", invalid="ignore"):
            ratio = (p.gap[late] - p.slack[late] - d) / d
            # A ratio on a whole number could floor either way (an overflowed one is no count to refine).
            fuzzy[late] = np.abs(ratio - np.round(ratio)) <= 4 * tol / d + 8 * EPSILON * (np.abs(ratio) + 1)
        missed[late] = np.floor(ratio) + 1.0
        ratios[late] = ratio
        return missed, fuzzy, ratios

    def _replay(
        self, p: _Points, last_reset: IntArray, which: IntArray, replays: Replays
    ) -> tuple[FloatArray, FloatArray]:
        """The loop's decision and miss count at the points ``which``, on the loop's exact slack: the sum
        of ``D - t``, rounded one addition at a time, over the tokens since the last late one (or since
        the first decode token)."""
        token = p.token[which]
        request_start = np.searchsorted(self.batch.offsets, token, side="right") - 1
        first = np.where(
            last_reset >= 0, p.token[np.maximum(last_reset, 0)] + 1, self.batch.offsets[request_start] + 1
        )
        return self._decide(first, token, p.deadline[which], p.gap[which], replays)

    def _decide(
        self, first: IntArray, token: IntArray, d: FloatArray, own: FloatArray, replays: Replays
    ) -> tuple[FloatArray, FloatArray]:
        """Late (1/0) and missed deadlines of the tokens ``token``, whose runs start at ``first``."""
        slack = replays.slack(first, token, d)
        late = own > d + slack
        if self.variant == "tokens":
            return late.astype(np.float64), late.astype(np.float64)
        with np.errstate(over="ignore", invalid="ignore"):
            missed = np.where(late, np.floor((own - slack - d) / d) + 1.0, 0.0)
        return late.astype(np.float64), missed

    def _freeze(
        self,
        rows: IntArray,
        p: _Points,
        tally: _Tally,
        band: FloatArray,
        bracket: tuple[FloatArray, FloatArray],
    ) -> None:
        """Freeze the requests whose every decision but one holds across the bracket.

        Over ``[low, high]`` the slack before any token moves by at most ``(m + 1) * (high - low)``
        (and the one unsteady decision moves later slack by no more than its own margin), so a margin
        or a miss ratio farther than ``band`` from its edge keeps its decision. Then the counts of all
        points but the unsteady one are fixed, and so is where its run starts (the last certain reset):
        later steps replay that one run. ``band`` is 0 where the bracket is still too wide to try.
        """
        if not (band > 0).any():
            return
        low, high = bracket
        size = len(rows)
        point_band = band[p.slot]
        steady = np.abs(tally.margin) > point_band
        with np.errstate(invalid="ignore"):
            ratio = np.abs(tally.ratio)
            drift = (point_band + ratio * (high - low)[p.slot]) / low[p.slot] + 8 * EPSILON * (ratio + 1)
            steady &= np.isnan(ratio) | (np.floor(tally.ratio - drift) == np.floor(tally.ratio + drift))
        steady[tally.replay] = False
        unsteady = np.flatnonzero(~steady)
        ok = (np.bincount(p.slot[unsteady], minlength=size) == 1) & ~tally.uncertain & (band > 0)
        pick = unsteady[ok[p.slot[unsteady]]]
        if len(pick) == 0:
            return
        keep = ok[p.slot]
        keep[pick] = False
        late = per_slot(p.slot[keep], tally.late[keep], size)[p.slot[pick]]
        missed = per_slot(p.slot[keep], tally.missed[keep], size)[p.slot[pick]]
        request = rows[p.slot[pick]]
        reset = tally.last_reset[pick]
        first = np.where(reset >= 0, p.token[np.maximum(reset, 0)] + 1, self.batch.offsets[request] + 1)
        self.fixed.set(request, late, missed, p.token[pick], first)
        self.frozen[request] = True

    def passes_frozen(self, rows: IntArray, deadline: FloatArray) -> BoolArray:
        """Verdicts of frozen requests: their fixed counts plus their one unsteady point, decided from
        the prefix form where it clears the rounding bands and by replaying its run where it does not."""
        f = self.fixed
        token, first = f.token[rows], f.first[rows]
        own = self.batch.values[token]
        tol = self.tolerance(rows, deadline)
        slack = (token - first) * deadline - (self.sums[token - 1] - self.sums[first - 1])
        margin = (deadline + slack) - own
        late = (margin < 0).astype(np.float64)
        missed = late.copy()
        close = np.abs(margin) <= 4 * tol
        if self.variant == "deadlines":
            with np.errstate(over="ignore", invalid="ignore"):
                ratio = (own - slack - deadline) / deadline
                missed = np.where(margin < 0, np.floor(ratio) + 1.0, 0.0)
                fuzzy = np.abs(ratio - np.round(ratio)) <= 4 * tol / deadline + 8 * EPSILON * (
                    np.abs(ratio) + 1
                )
            close |= (margin < 0) & fuzzy
        if close.any():
            which = np.flatnonzero(close)
            late[which], missed[which] = self._decide(
                first[which], token[which], deadline[which], own[which], self.frozen_replays
            )
        late_count = f.late[rows] + late
        met = self.decode_count[rows] - late_count
        return self._fluidity_passes(met, f.missed[rows] + missed, late_count)

    def _fluidity_passes(self, met: FloatArray, missed: FloatArray, late: FloatArray) -> BoolArray:
        # The same float operations as the sweep (and the loop's int division, equal below 2**53).
        total = met + (missed if self.variant == "deadlines" else late)
        with np.errstate(invalid="ignore", divide="ignore"):
            fluidity = np.where(total > 0, 1.0 - missed / total, 1.0)
        return fluidity >= self.target

    def _exact(self, rows: IntArray, deadline: FloatArray) -> BoolArray:
        self.exact_verdicts += len(rows)
        return exact_passes(self.batch, rows, deadline, self.target, self.variant)
