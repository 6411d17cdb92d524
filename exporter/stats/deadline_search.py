"""The minimum-decode-deadline bisection, each step decided from a closed form and checked against rounding.

The bisection is the reference's own (``fluidity._min_deadline_by_loop``): per request, on the bit
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
bounded amount per request (``tolerance``, as in ``deadline_points``). Decisions that clear that bound
are the loop's. Near the answer one decision always sits within it (that is what a threshold is): a
token's on-time test or a miss count on a whole number. That one is the loop's own float arithmetic,
replayed on the loop's exact slack (the rounded sum of ``D - t`` since the last late token). Anything
less tidy (two such decisions in a request) goes to an exact engine: the per-token loop or the sweep.
Steps far below the answer need no token at all: the total lateness of a request is at least
``T - m*D``, so its fluidity is at most ``m / (T/D)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from exporter.stats.accounting import Variant
from exporter.stats.batch import FloatArray, IntervalBatch
from exporter.stats.deadline_arrays import longest_decode_gap
from exporter.stats.deadline_verdicts import Verdicts


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
