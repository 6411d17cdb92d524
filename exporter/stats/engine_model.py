"""A small model of a continuous-batching engine, fitted to what capacity trials measure, and the load
it predicts the SLO stops being met at (pure numpy).

Decode. Each step of a continuous-batching engine serves every running request one token, and costs a
fixed part plus a part per running request: the gap between two tokens of a stream is ``W + H n`` with
``n`` the requests decoding at that moment (the published form: Orca, Vidur, BLIS). A client sees every
stream's token stamps, so ``n`` at a gap is the count of its streams between their first token and their
end (``decoding``); the gaps are binned by that count (``DecodeBins``: count, sum and sum of squares per
``n``, so trials pool exactly) and the line is their least-squares fit (``fit_decode_line``), with the
covariance of ``(W, H)``. A gap during which another stream got its first token waited on that
prefill (whole-prompt prefill runs it in one step): such gaps are left out, so the line is the decode
steps' own; the prefill's cost is what the calibration of the knee sees in the headroom.

Queueing. By Little's law the requests decoding at an offered rate ``r`` are ``n = r L g`` (``L`` output
tokens per request, each taking a gap ``g``), and with ``g = W + H n`` the gap the engine settles at is
``g(r) = W / (1 - r L H)``: finite below the decode saturation ``1 / (L H)``, the throughput ceiling.

The knee. How the SLO's headroom (``exporter.stats.headroom``: the factor every deadline could shrink by
and still pass, 1 at the capacity) follows the gap is calibrated on the trials themselves: ``log h = a
- b log g(r)``, ``b`` fitted over trials at two loads or more, 1 (the headroom inversely proportional to
the gap) from one. The predicted capacity is where that line reaches ``h = 1``, mapped back to a load
through ``g(r)``; its interval comes from the fit's own uncertainty (``(W, H)`` drawn from their
covariance, the calibration's residual spread), by a seeded sample so the same trials give the same
answer. The model places trials; it never decides the answer: published simulators are accurate below
saturation and wrong at the knee.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from exporter.stats.batch import FloatArray

# Headroom within the range the headroom search reports (exporter.jobs.capacity_search.HEADROOM_RANGE).
_HEADROOM_RANGE = (1.0 / 64.0, 64.0)
# The calibration's slope is held in this range: from two noisy trials a slope near 0 would put the
# knee at saturation, one far above 1 would put it at the trial.
SLOPE_RANGE = (0.5, 4.0)
# The calibration's residual spread (log headroom) when too few trials show their own: about the
# difference between two samples of 200 requests at one load on the bench's scenarios.
DEFAULT_SPREAD = 0.1
DRAWS = 256  # samples of the fit behind the interval
CONFIDENCE = 0.9  # of the prediction's interval
MIN_GAPS = 50  # decode gaps a fit needs
LOCAL_TRIALS = 2  # trials the knee's calibration uses: those nearest the knee


@dataclass(frozen=True)
class DecodeBins:
    """Decode gaps (seconds per token) binned by the requests decoding when they happened."""

    running: tuple[int, ...]
    count: tuple[int, ...]
    total: tuple[float, ...]  # sum of the gaps
    squares: tuple[float, ...]  # sum of their squares

    @property
    def gaps(self) -> int:
        return sum(self.count)

    def to_dict(self) -> dict[str, list[float] | list[int]]:
        return {
            "running": list(self.running),
            "count": list(self.count),
            "total": list(self.total),
            "squares": list(self.squares),
        }

    @staticmethod
    def of(raw: object) -> DecodeBins | None:
        """Bins from ``to_dict``'s form (a trial's stored figures), None when malformed."""
        if not isinstance(raw, dict):
            return None
        try:
            columns = [raw[key] for key in ("running", "count", "total", "squares")]
            running, count = tuple(int(v) for v in columns[0]), tuple(int(v) for v in columns[1])
            total, squares = tuple(float(v) for v in columns[2]), tuple(float(v) for v in columns[3])
        except (KeyError, TypeError, ValueError):
            return None
        if not len(running) == len(count) == len(total) == len(squares):
            return None
        return DecodeBins(running, count, total, squares)


def decoding(firsts: FloatArray, ends: FloatArray, at: FloatArray) -> FloatArray:
    """How many streams were decoding (past their first token, before their end) at each moment."""
    started = np.searchsorted(np.sort(firsts), at, side="right")
    ended = np.searchsorted(np.sort(ends), at, side="right")
    return np.asarray(started - ended, dtype=np.float64)


def decode_bins(streams: Sequence[tuple[Sequence[float], Sequence[int]]]) -> DecodeBins:
    """The decode gaps of ``streams`` (each its token-event stamps and the tokens each event carried)
    binned by the streams decoding at the gap's midpoint. An event carrying ``k`` tokens is ``k`` gaps
    of a ``k``-th of its wait each: the engine made them in one wait."""
    usable = [
        (np.asarray(t, dtype=np.float64), np.asarray(k, dtype=np.float64)) for t, k in streams if len(t)
    ]
    if not usable:
        return DecodeBins((), (), (), ())
    firsts = np.array([t[0] for t, _ in usable])
    ends = np.array([t[-1] for t, _ in usable])
    order = np.sort(firsts)
    mids, gaps, weights = [], [], []
    for times, tokens in usable:
        if len(times) < 2:
            continue
        # A gap in which another stream got its first token waited on that stream's prefill: it is
        # a prefill's cost, not a decode step's, and is left out of the line.
        starts = np.searchsorted(order, times[:-1], side="right")
        clean = np.searchsorted(order, times[1:], side="right") == starts
        waits = np.diff(times)[clean]
        per = np.maximum(tokens[1:][clean], 1.0)
        mids.append(((times[1:] + times[:-1]) / 2.0)[clean])
        gaps.append(waits / per)
        weights.append(per)
    if not mids:
        return DecodeBins((), (), (), ())
    at, gap, weight = np.concatenate(mids), np.concatenate(gaps), np.concatenate(weights)
    # A stream counts itself at its own gaps: it is decoding there, though its end stamp bounds it.
    running = np.maximum(decoding(firsts, ends, at), 1.0).astype(np.int64)
    return _binned(running, gap, weight)


def _binned(running: np.ndarray, gap: FloatArray, weight: FloatArray) -> DecodeBins:
    keys = np.unique(running)
    index = np.searchsorted(keys, running)
    count = np.bincount(index, weights=weight, minlength=len(keys))
    total = np.bincount(index, weights=gap * weight, minlength=len(keys))
    squares = np.bincount(index, weights=gap * gap * weight, minlength=len(keys))
    return DecodeBins(
        tuple(int(k) for k in keys), tuple(round(c) for c in count),
        tuple(float(s) for s in total), tuple(float(s) for s in squares),
    )  # fmt: skip


def pooled(parts: Sequence[DecodeBins]) -> DecodeBins:
    """Bins of several trials summed per running count."""
    merged: dict[int, list[float]] = {}
    for part in parts:
        for n, c, s, q in zip(part.running, part.count, part.total, part.squares, strict=True):
            row = merged.setdefault(n, [0.0, 0.0, 0.0])
            row[0], row[1], row[2] = row[0] + c, row[1] + s, row[2] + q
    keys = sorted(merged)
    return DecodeBins(
        tuple(keys), tuple(int(merged[k][0]) for k in keys),
        tuple(merged[k][1] for k in keys), tuple(merged[k][2] for k in keys),
    )  # fmt: skip


@dataclass(frozen=True)
class DecodeLine:
    """``gap = fixed + per_running * n`` (seconds), with the covariance of the two and the fit's R^2."""

    fixed: float
    per_running: float
    covariance: tuple[tuple[float, float], tuple[float, float]]
    r_squared: float
    gaps: int

    def gap(self, running: float) -> float:
        return self.fixed + self.per_running * running


def fit_decode_line(bins: DecodeBins, effective: float = 1.0) -> DecodeLine | None:
    """Least squares of the gaps on the running count (every gap one point), None with fewer than
    ``MIN_GAPS`` gaps or a single running count. ``effective``: gaps per independent sample (a
    stream's gaps are correlated: the share it waited on one prefill shows in all of them), which
    scales the covariance."""
    n = np.asarray(bins.running, dtype=np.float64)
    c = np.asarray(bins.count, dtype=np.float64)
    s = np.asarray(bins.total, dtype=np.float64)
    q = np.asarray(bins.squares, dtype=np.float64)
    m = float(c.sum())
    if m < MIN_GAPS or np.count_nonzero(c) < 2:
        return None
    sx, sxx, sy, sxy = float(c @ n), float(c @ (n * n)), float(s.sum()), float(n @ s)
    det = m * sxx - sx * sx
    if det <= 0.0:
        return None
    slope = (m * sxy - sx * sy) / det
    fixed = (sy - slope * sx) / m
    syy = float(q.sum())
    sse = max(
        syy - 2 * fixed * sy - 2 * slope * sxy + m * fixed**2 + 2 * fixed * slope * sx + slope**2 * sxx, 0.0
    )
    sst = max(syy - sy * sy / m, 0.0)
    sigma2 = sse / max(m - 2.0, 1.0) * max(effective, 1.0)
    cov = ((sigma2 * sxx / det, -sigma2 * sx / det), (-sigma2 * sx / det, sigma2 * m / det))
    r2 = 1.0 - sse / sst if sst > 0.0 else 0.0
    return DecodeLine(fixed, slope, cov, r2, int(m))


def settled_gap(fixed: float, per_running: float, rate: float, output_tokens: float) -> float:
    """The gap an engine with decode line ``(fixed, per_running)`` settles at under ``rate`` requests/s
    of ``output_tokens`` each (Little's law): ``W / (1 - r L H)``; inf at or past saturation."""
    load = rate * output_tokens * per_running
    return fixed / (1.0 - load) if load < 1.0 else math.inf


def rate_at_gap(fixed: float, per_running: float, gap: float, output_tokens: float) -> float:
    """The rate at which the settled gap is ``gap`` (inverse of ``settled_gap``)."""
    return (1.0 - fixed / gap) / (output_tokens * per_running)


@dataclass(frozen=True)
class TrialPoint:
    """What the knee's calibration uses of one trial: its rate, headroom and output tokens per request."""

    rate: float
    headroom: float
    output_tokens: float


@dataclass(frozen=True)
class Prediction:
    """The predicted capacity (requests/s) with its interval, and what it came from."""

    load: float
    low: float
    high: float
    saturation: float  # the decode throughput ceiling 1 / (L H), requests/s
    line: DecodeLine
    slope: float  # the calibration's b
    trials: int


def predict_knee(line: DecodeLine, points: Sequence[TrialPoint]) -> Prediction | None:
    """The rate at which the calibrated headroom reaches 1 (module docstring), None when the line
    does not rise with the running count, or no trial has a finite headroom."""
    usable = [p for p in points if math.isfinite(p.headroom) and p.rate > 0.0 and p.output_tokens > 0.0]
    if line.per_running <= 0.0 or line.fixed <= 0.0 or not usable:
        return None
    tokens = float(np.mean([p.output_tokens for p in usable]))
    # The calibration is local: the trials nearest the knee (headroom nearest 1). Over every trial,
    # light loads far from it (headroom 4-6) pull the slope, and measured on the simulator the knee
    # then lands 3-5% above the last pass again and again, a creep of one tolerance per trial.
    usable = sorted(usable, key=lambda p: abs(math.log(min(max(p.headroom, 1e-9), 1e9))))[:LOCAL_TRIALS]
    centre = _knee(line.fixed, line.per_running, tokens, usable)
    if centre is None:
        return None
    rng = np.random.default_rng(0)
    mean = np.array([line.fixed, line.per_running])
    draws = rng.multivariate_normal(mean, np.array(line.covariance), size=DRAWS, check_valid="ignore")
    spread = _spread(line, tokens, usable)
    shifts = rng.normal(0.0, spread, size=DRAWS)
    sample = [
        k for (w, h), shift in zip(draws.tolist(), shifts.tolist(), strict=True)
        if w > 0.0 and h > 0.0 and (k := _knee(w, h, tokens, usable, shift)) is not None
    ]  # fmt: skip
    tail = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(sample, [tail, 1.0 - tail]).tolist() if sample else (centre, centre)
    saturation = 1.0 / (tokens * line.per_running)
    slope = _slope(line.fixed, line.per_running, tokens, usable)
    return Prediction(centre, min(low, centre), max(high, centre), saturation, line, slope, len(usable))


def _knee(
    w: float, h: float, tokens: float, points: Sequence[TrialPoint], shift: float = 0.0
) -> float | None:
    """The rate where ``log headroom = a - b log g(r)`` is 0, ``shift`` added to ``a``."""
    logs = _calibration(w, h, tokens, points)
    if logs is None:
        return None
    x, y = logs
    b = _slope_of(x, y)
    a = float(np.mean(y + b * x)) + shift
    gap = math.exp(a / b)
    if gap <= w:
        return None  # the SLO fails already at the engine's fastest gap: no load passes
    return rate_at_gap(w, h, gap, tokens)


def _calibration(
    w: float, h: float, tokens: float, points: Sequence[TrialPoint]
) -> tuple[FloatArray, FloatArray] | None:
    gaps = np.array([settled_gap(w, h, p.rate, tokens) for p in points])
    if not np.all(np.isfinite(gaps)):
        # A trial past the fitted saturation: its gap is bounded by what it measured, not infinite;
        # the fit does not explain it, and the calibration leaves it out.
        keep = np.isfinite(gaps)
        if not keep.any():
            return None
        points = [p for p, k in zip(points, keep.tolist(), strict=True) if k]
        gaps = gaps[keep]
    low, high = _HEADROOM_RANGE
    heads = np.log(np.clip([p.headroom for p in points], low, high))
    return np.log(gaps), heads


def _slope_of(x: FloatArray, y: FloatArray) -> float:
    """``b`` of ``y = a - b x``: fitted over distinct ``x``, 1 without two."""
    if len(x) < 2 or float(np.ptp(x)) < 1e-6:
        return 1.0
    fitted = -float(np.polyfit(x, y, 1)[0])
    return min(max(fitted, SLOPE_RANGE[0]), SLOPE_RANGE[1])


def _slope(w: float, h: float, tokens: float, points: Sequence[TrialPoint]) -> float:
    logs = _calibration(w, h, tokens, points)
    return _slope_of(*logs) if logs is not None else 1.0


def _spread(line: DecodeLine, tokens: float, points: Sequence[TrialPoint]) -> float:
    """The calibration's residual spread in log headroom (``DEFAULT_SPREAD`` with under three trials)."""
    logs = _calibration(line.fixed, line.per_running, tokens, points)
    if logs is None or len(logs[0]) < 3:
        return DEFAULT_SPREAD
    x, y = logs
    b = _slope_of(x, y)
    residual = y + b * x - float(np.mean(y + b * x))
    return max(float(np.std(residual, ddof=1)), DEFAULT_SPREAD / 2.0)
