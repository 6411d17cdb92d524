"""The minimum decode deadline of each request: the smallest ``Dd`` at which its decode-only fluidity
reaches a target, found by bisection on the bit patterns of positive floats. ``min_deadlines`` is the
entry point; it picks one of three ways to the same answer by the batch's size and options:

* per request with the per-token loop (``_min_deadline_by_loop``): the reference, cheapest for a few
  requests;
* every request at once with the sweep (``_min_deadlines_by_sweep``), one sweep per step: needed with
  a slack cap;
* every request at once, each step decided from the late tokens by a closed form
  (``min_deadlines_by_search``), without a slack cap. The rest of this docstring is about it.

The search by the late tokens. Its bisection is the reference's own (``_min_deadline_by_loop``): per request, on the bit
patterns of floats in ``(0, longest decode gap]``, with the same midpoints, so the same path and the
same result. Only the way a step's verdict (does decode-only fluidity reach the target at ``D``?) is
reached differs.

Without a slack cap, slack follows Lindley's recursion ``s_k = max(0, s_{k-1} + D - t_k)``; a token is
late exactly when that clips. With ``S(k) = k*D - T[k]`` (``T`` the running sum of decode gaps),
``s_k = S(k) - min(0, S(1..k))``: the slack before any token is a difference of two prefix values, no
loop needed. A token faster than ``D`` raises ``S``: it is on time and never sets the running minimum,
so only *points* (gaps near or above ``D``) are looked at. And since slack never falls as ``D`` grows,
a token on time at a failing deadline stays on time for the rest of the search: after the first failing
steps only the late tokens are left (a few per request). Once the bracket is narrow enough that every
decision of a request but one holds across it (the slack moves by at most ``(m + 1)`` times the
bracket's width), the request is frozen: its other counts are kept, and later steps decide that one
token alone.

Exactness. The prefix form rounds differently from the loop's one-by-one slack updates, by at most a
bounded amount per request (``tolerance``, as in ``fluidity_engines.evaluate_by_points``). Decisions
that clear that bound are the loop's. Near the answer one decision always sits within it (that is what a threshold is): a
token's on-time test or a miss count on a whole number. That one is the loop's own float arithmetic,
replayed on the loop's exact slack (the rounded sum of ``D - t`` since the last late token). Anything
less tidy (two such decisions in a request) goes to an exact engine: the per-token loop or the sweep.
Steps far below the answer need no token at all: the total lateness of a request is at least
``T - m*D``, so its fluidity is at most ``m / (T/D)``.

How a step is decided (``Verdicts``): which tokens stay candidates as the brackets narrow, when a
request is frozen, and which decisions are replayed on the loop's own slack (``Replays``) or handed to
the exact engines (``exact_passes``: the per-token loop for a few requests, one sweep for many). The
array helpers at the end are pure numpy, each exact (sums accumulate in the loop's order; minima and
indexes do not round).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import numpy as np
from numpy.typing import NDArray

from exporter.stats.accounting import FluidityOptions, Variant
from exporter.stats.batch import ColumnLayout, FloatArray, IntArray, IntervalBatch
from exporter.stats.fluidity_engines import EPSILON, TOLERANCE_FACTOR, DeadlineSweep, loop_request

BoolArray = NDArray[np.bool_]

# Below this many requests the deadline bisection runs the per-token loop per request: a sweep costs a
# few numpy calls per token position however few requests share it (measured crossover ~50 requests).
LOOP_BISECTION_MAX_REQUESTS = 32
# The same for the search that needs no slack cap (``min_deadlines_by_search``): its cost per step is a
# few dozen numpy calls, whatever the length (measured crossover ~4 requests of 256 tokens: 18 ms either way).
LOOP_SEARCH_MAX_REQUESTS = 3
# Up to this many uncertain requests in a step are replayed one by one with the per-token loop; more
# share one vectorised sweep (whose cost is per token position, whatever the number of requests).
LOOP_MAX_UNCERTAIN = 32
# Relative margin of the lower bound on misses: far above its roundings (about m * eps), far below
# anything that matters to the bracket.
BOUND_MARGIN = 1e-9


def min_deadlines(batch: IntervalBatch, target_fluidity: float, options: FluidityOptions) -> FloatArray:
    """Per request, the smallest decode deadline at which its decode-only fluidity (``options``) reaches
    ``target_fluidity``; 0.0 where any positive deadline passes. The caller checks the target."""
    if options.slack_cap is None and len(batch) > LOOP_SEARCH_MAX_REQUESTS:
        return min_deadlines_by_search(batch, target_fluidity, options.variant).minima
    if len(batch) <= LOOP_BISECTION_MAX_REQUESTS:
        return np.array(
            [
                _min_deadline_by_loop(batch.request(i).tolist(), target_fluidity, options)
                for i in range(len(batch))
            ]
        )
    return _min_deadlines_by_sweep(batch, target_fluidity, options)


# -- the bisection by the loop, and by the sweep --------------------------------------------------


def _min_deadlines_by_sweep(
    batch: IntervalBatch, target_fluidity: float, options: FluidityOptions
) -> FloatArray:
    layout = batch.columns
    sweep = DeadlineSweep(layout, options, with_stall_stats=False)
    high = _longest_decode_gap_by_rank(layout).view(np.int64)
    low = np.zeros_like(high)  # bit pattern of 0.0: fails by convention (no deadline is 0)
    searching = high > 0
    while True:
        open_rows = searching & (high - low > 1)
        if not open_rows.any():
            break
        middle = low + (high - low) // 2
        deadlines = np.where(open_rows, middle.view(np.float64), 1.0)
        passes = sweep.run(deadlines, deadlines).fluidity >= target_fluidity
        high = np.where(open_rows & passes, middle, high)
        low = np.where(open_rows & ~passes, middle, low)
    # Ending on the smallest positive float means every positive deadline passes: report 0.0.
    by_rank = np.where(searching & (high > 1), high.view(np.float64), 0.0)
    result = np.empty_like(by_rank)
    result[layout.rank_to_request] = by_rank
    return result


def _min_deadline_by_loop(intervals: list[float], target_fluidity: float, options: FluidityOptions) -> float:
    """The same bisection for one request with the per-token loop: cheaper than a sweep for few requests,
    whose cost is per token position whatever the number of requests."""
    high = _float_bits(max(intervals[1:], default=0.0))
    if high <= 1:  # no positive decode gap: any positive deadline passes
        return 0.0
    low = 0
    while high - low > 1:
        middle = low + (high - low) // 2
        if _passes(intervals, _bits_float(middle), target_fluidity, options):
            high = middle
        else:
            low = middle
    return _bits_float(high) if high > 1 else 0.0


def _passes(
    intervals: list[float], deadline: float, target_fluidity: float, options: FluidityOptions
) -> bool:
    try:
        return loop_request(intervals, deadline, deadline, options).fluidity >= target_fluidity
    except OverflowError:  # a stall spans infinitely many of these deadlines: fluidity 0, as the sweep says
        return False


def _float_bits(value: float) -> int:
    return int(np.float64(value).view(np.int64))


def _bits_float(bits: int) -> float:
    return float(np.int64(bits).view(np.float64))


def _longest_decode_gap_by_rank(layout: ColumnLayout) -> FloatArray:
    longest = np.zeros(len(layout.rank_to_request), dtype=np.float64)
    for position in range(1, layout.positions):
        column = layout.column(position)
        head = longest[: len(column)]
        np.maximum(head, column, out=head)
    return longest


# -- the bisection decided from the late tokens ---------------------------------------------------


@dataclass(frozen=True, eq=False)
class DeadlineSearch:
    """Per request (in request order) the minimum decode deadline; how many step verdicts the exact
    engines had to give (0 on measured data; more on streams that sit exactly on deadlines); how many
    requests finished their search frozen (see ``Verdicts._freeze``)."""

    minima: FloatArray
    exact_verdicts: int
    frozen: int


def min_deadlines_by_search(batch: IntervalBatch, target: float, variant: Variant) -> DeadlineSearch:
    """The reference bisection for every request at once (no slack cap), each step decided cheaply.
    Sums that overflow (absurd gaps near the float range) are expected and sent to the exact engines,
    so numpy's overflow warnings would only be noise on a user's terminal."""
    with np.errstate(over="ignore"):
        return _search(batch, target, variant)


def _search(batch: IntervalBatch, target: float, variant: Variant) -> DeadlineSearch:
    verdicts = Verdicts(batch, target, variant)
    high = longest_decode_gap(batch).view(np.int64)
    low = np.zeros_like(high)  # bit pattern of 0.0: fails by convention (no deadline is 0)
    searching = high > 0
    while True:
        rows = np.flatnonzero(searching & (high - low > 1))
        if len(rows) == 0:
            break
        verdicts.forget_closed(rows)
        middle = low[rows] + (high[rows] - low[rows]) // 2
        deadline = middle.view(np.float64)
        passes = np.zeros(len(rows), dtype=np.bool_)
        ask = deadline >= verdicts.fail_below[rows]
        frozen = np.flatnonzero(ask & verdicts.frozen[rows])
        if len(frozen):
            passes[frozen] = verdicts.passes_frozen(rows[frozen], deadline[frozen])
        fresh = np.flatnonzero(ask & ~verdicts.frozen[rows])
        if len(fresh):
            bracket = (low[rows[fresh]].view(np.float64), high[rows[fresh]].view(np.float64))
            passes[fresh] = verdicts.passes(rows[fresh], deadline[fresh], bracket)
        high[rows] = np.where(passes, middle, high[rows])
        low[rows] = np.where(passes, low[rows], middle)
    # Ending on the smallest positive float means every positive deadline passes: report 0.0.
    minima = np.where(searching & (high > 1), high.view(np.float64), 0.0)
    return DeadlineSearch(minima, verdicts.exact_verdicts, int(np.count_nonzero(verdicts.frozen)))


# -- one step's verdicts --------------------------------------------------------------------------


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
    """Decides ``fluidity(D) >= target`` for many requests at once, each at its own ``D``.

    Over 150 lines, kept whole: it holds what narrows from one bisection step to the next, the
    candidate tokens (parallel arrays cut together), the frozen requests' fixed counts and the replay
    layouts kept while the runs stay the same. Steps mutate that state in place on purpose: rebuilding
    it as new values every step would copy arrays as long as the batch dozens of times per search, the
    cost this search exists to avoid. The step's own results are small values (``_Points``,
    ``_Tally``)."""

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
        """A bound on how far the prefix form and the loop can drift apart (see ``fluidity_engines``)."""
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


# -- exact verdicts, where rounding could change one ----------------------------------------------


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


# -- array work -----------------------------------------------------------------------------------


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
