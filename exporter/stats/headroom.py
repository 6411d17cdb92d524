"""How far a run is from its fluidity SLO: the deadline headroom, and when a trial's outcome is decided.

A capacity search needs more than pass/fail from each trial: to interpolate towards the capacity it needs
a margin that moves smoothly with load. Pass/fail is a step; the share of fluid requests sits at 100%
until just below the capacity and then falls off a cliff. The headroom does not:

``headroom = 1 / s*``, where ``s*`` is the smallest factor by which every deadline (``Dp`` and ``Dd``
alike) could be scaled and still let ``percentile`` % of requests reach ``target_fluidity``. Scaling the
deadlines by ``s`` is the same as playing every interval ``s`` times faster, so ``s*`` is "how much
faster the system would have to be": a headroom of 1.5 means the deadlines could be a third tighter,
0.8 means they would have to be 25% looser. Below capacity it is above 1 and falls steadily as queues
and batch sizes grow with load; the SLO holds exactly when it is at least 1 (up to the bisection's
tolerance; the pass/fail verdict itself is computed directly at scale 1, never from the headroom).

Requests that failed outright (errors, timeouts) meet no deadline at any scale: their factor is ``inf``.
"""

from __future__ import annotations

import math

import numpy as np

from exporter.stats.accounting import FluidityOptions
from exporter.stats.batch import FloatArray, IntervalBatch
from exporter.stats.binomial import Verdict, classify_fraction
from exporter.stats.distribution import nearest_rank, nearest_rank_index
from exporter.stats.fluidity import evaluate

# Scales searched: from deadlines 64x tighter to 64x looser. Beyond, the headroom is clipped: a trial
# that far from its SLO is decided, and interpolation only needs the sign and a rough size there.
MIN_SCALE, MAX_SCALE = 1.0 / 64.0, 64.0
SCALE_STEPS = 16  # halvings of a 12-octave range: ends within 2**(12/2**16), i.e. 0.013%, of the factor


def required_scales(
    batch: IntervalBatch,
    prefill_deadlines: FloatArray,
    decode_deadline: float,
    target_fluidity: float,
    options: FluidityOptions | None = None,
) -> FloatArray:
    """Per request, the smallest factor ``s`` in ``[MIN_SCALE, MAX_SCALE]`` such that the request reaches
    ``target_fluidity`` with deadlines ``s * Dp`` and ``s * Dd``; ``inf`` when even ``MAX_SCALE`` fails.

    All requests are bisected together on ``log2(s)``, one vectorised evaluation per step.
    """
    count = len(batch)
    dp = np.asarray(prefill_deadlines, dtype=np.float64).reshape(-1)
    if len(dp) != count:
        raise ValueError(f"{len(dp)} prefill deadlines for {count} requests")
    low = np.full(count, math.log2(MIN_SCALE))
    high = np.full(count, math.log2(MAX_SCALE))
    if count == 0:
        return np.zeros(0)

    def passes(log_scale: FloatArray) -> np.ndarray:
        scale = np.exp2(log_scale)
        result = evaluate(batch, dp * scale, decode_deadline * scale, options)
        return np.asarray(result.fluidity >= target_fluidity)

    at_low, at_high = passes(low), passes(high)
    for _ in range(SCALE_STEPS):
        middle = (low + high) / 2.0
        ok = passes(middle)
        high = np.where(ok, middle, high)
        low = np.where(ok, low, middle)
    scales: FloatArray = np.exp2(high)
    scales[at_low] = MIN_SCALE
    scales[~at_high] = math.inf
    return scales


def deadline_headroom(scales: FloatArray, percentile: float) -> float:
    """``1 / s*`` where ``s*`` is the nearest-rank ``percentile`` of the per-request factors (``inf`` for
    failed requests): 0.0 when more than the allowed share failed outright, NaN with no request."""
    values = np.asarray(scales, dtype=np.float64)
    if len(values) == 0:
        return math.nan
    needed = nearest_rank(values, percentile / 100.0)
    return 0.0 if math.isinf(needed) else 1.0 / needed


def allowed_failures(requests: int, percentile: float) -> int:
    """How many of ``requests`` may miss the target while ``percentile`` % still meet it (nearest rank:
    at least ``ceil(p * n)`` must meet it)."""
    if requests <= 0:
        return 0
    return requests - nearest_rank_index(requests, percentile / 100.0)


def decided_failure(failures: int, planned: int, percentile: float, confidence: float | None = None) -> bool:
    """The early-stopping rule for a failing trial: once more requests have missed the target than the
    whole trial of ``planned`` requests may miss, no outcome of the rest can make it pass.

    This is a certainty about the trial's point verdict: a trial stopped by it reports exactly the
    verdict the full trial would have reported. It is not a confident verdict about the target: at p99
    over 120 requests two misses decide it. With ``confidence`` the rule also needs the failure to be
    confident even if every other request met the target: the Clopper-Pearson interval of
    ``planned - failures`` successes of ``planned`` lies wholly below ``percentile`` % (about 7 misses
    of 200 at p99 and 95%), the confidence a full trial's failure needs. (Stopping a *passing* trial early cannot be justified this way before nearly
    every request is in: at p99 even zero misses in 299 requests leave the 95% upper bound on the
    miss rate above 1%, so passing trials run to the end.)
    """
    certain = failures > allowed_failures(planned, percentile)
    if confidence is None or not certain:
        return certain
    successes = max(planned - failures, 0)
    return classify_fraction(successes, planned, percentile / 100.0, confidence) is Verdict.FAIL


def give_up_wait(
    prefill_deadline: float, decode_deadline: float, output_tokens: int, target_fluidity: float
) -> float:
    """How long a request may wait for its first token before it can no longer reach ``target_fluidity``.

    A first token ``w`` seconds late (``w > Dp``) misses ``M = floor((w - Dp) / Dd) + 1`` deadlines and,
    with no slack banked yet, at best every later token is on time: fluidity is at most
    ``1 - M / (M + n - 1)`` for ``n`` output tokens. That falls below the target once
    ``M > (1 - target) * (n - 1) / target``, i.e. once the wait exceeds ``Dp + (M* - 1) * Dd`` for the
    smallest such integer ``M*``. A request that ends with fewer tokens than ``n`` does worse, so with
    ``n`` the most it may get the bound stays a certainty. The wait scales with the deadlines: at
    deadlines ``s`` times as long it is ``s`` times as long.
    """
    later = max(output_tokens - 1, 0)
    first_failing = max(math.floor((1.0 - target_fluidity) * later / target_fluidity), 0)
    # Settle the integer with the accounting's own float formula, so rounding cannot disagree with it.
    while first_failing > 0 and _best_fluidity(first_failing - 1, later) < target_fluidity:
        first_failing -= 1
    while _best_fluidity(first_failing, later) >= target_fluidity:
        first_failing += 1
    return prefill_deadline + (first_failing - 1) * decode_deadline


def _best_fluidity(missed: int, later_tokens: int) -> float:
    total = missed + later_tokens
    return 1.0 - missed / total if total else 1.0
