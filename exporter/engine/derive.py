"""Figures over a window of engine snapshots, as pure functions: rates, histogram deltas, quantiles.

Counters and histograms are cumulative since the engine started, so a window's figures are differences
between snapshots. A counter that goes down was reset (the engine restarted); as in Prometheus'
``increase()``, its new value is then the increase since the reset. Differences are taken between
*consecutive* snapshots and added up, so a restart in the middle of a window loses only what happened
between the last scrape before it and the restart, not the whole window.

``histogram_quantile`` is Prometheus' own (``promql/quantile.go``, ``bucketQuantile``): find the bucket
holding the rank ``q * count``, then interpolate linearly inside it, the first bucket starting at 0; a
rank in the +Inf bucket answers the highest finite bound. Its answer is only as fine as the buckets:
with vLLM's TTFT buckets a value between 0.1 s and 0.25 s can be off by up to 150 ms.

Two of its answers are not measurements at all, and ``bucket_quantile`` says which (``Resolution``): a
rank in a bucket that starts at 0 gives only an upper bound (vLLM's queue-time histogram starts with
0.3 s, so requests that all queued 0.6 ms get a "p50" of 0.15 s and a "p99" of 0.297 s, which mean no
more than "at most 0.3 s"), and a rank in the +Inf bucket only a lower bound (the highest finite bound).
"""

from __future__ import annotations

import bisect
import enum
import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from exporter.engine.catalogue import SIGNAL_TYPES, Signal, SignalType
from exporter.engine.snapshot import EngineSnapshot, HistogramData
from exporter.stats.distribution import percentile

DEFAULT_QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.99)

Buckets = Sequence[tuple[float, float]]


def counter_increase(values: Sequence[float]) -> tuple[float, int]:
    """Total increase over successive readings of a counter, and how many resets it went through."""
    increase, resets = 0.0, 0
    for previous, current in itertools.pairwise(values):
        if current < previous:
            increase += current
            resets += 1
        else:
            increase += current - previous
    return increase, resets


def histogram_delta(old: HistogramData, new: HistogramData) -> tuple[HistogramData, bool]:
    """Observations between two readings, and whether the histogram was reset (then ``new`` itself).

    A reset shows as a lower count, any bucket going down, or different bucket bounds (a restart with
    another configuration).
    """
    same_bounds = [b for b, _ in old.buckets] == [b for b, _ in new.buckets]
    went_down = new.count < old.count or any(
        n < o for (_, o), (_, n) in zip(old.buckets, new.buckets, strict=False)
    )
    if not same_bounds or went_down:
        return new, True
    buckets = tuple((bound, n - o) for (bound, o), (_, n) in zip(old.buckets, new.buckets, strict=True))
    return HistogramData(buckets, new.sum - old.sum, new.count - old.count), False


def add_histograms(a: HistogramData, b: HistogramData) -> HistogramData:
    """Sum of two histograms with the same bounds."""
    if [bound for bound, _ in a.buckets] != [bound for bound, _ in b.buckets]:
        raise ValueError("cannot add histograms with different bucket bounds")
    buckets = tuple((bound, x + y) for (bound, x), (_, y) in zip(a.buckets, b.buckets, strict=True))
    return HistogramData(buckets, a.sum + b.sum, a.count + b.count)


def histogram_increase(readings: Sequence[HistogramData]) -> tuple[HistogramData, int]:
    """Observations over successive readings, and the number of resets.

    Deltas of consecutive readings are added up; when the bounds change (a restart with other buckets)
    the older deltas cannot be added to the newer ones, so the result starts again from that reset.
    """
    if not readings:
        raise ValueError("histogram_increase needs at least one reading")
    total = _empty_like(readings[0])
    resets = 0
    for old, new in itertools.pairwise(readings):
        delta, reset = histogram_delta(old, new)
        resets += reset
        same = [b for b, _ in delta.buckets] == [b for b, _ in total.buckets]
        total = add_histograms(total, delta) if same else delta
    return total, resets


def _empty_like(histogram: HistogramData) -> HistogramData:
    return HistogramData(tuple((bound, 0.0) for bound, _ in histogram.buckets), 0.0, 0.0)


class Resolution(enum.Enum):
    """What a histogram's buckets tell of one of its quantiles."""

    MEASURED = "measured"  # interpolated inside a bucket with two finite bounds above 0
    UPPER_BOUND = "upper"  # in a bucket that starts at 0: only "at most its upper bound" is known
    LOWER_BOUND = "lower"  # in the +Inf bucket: only "above the highest finite bound" is known


@dataclass(frozen=True)
class BucketQuantile:
    """Prometheus' answer for a quantile, with the bucket ``(lower, upper]`` the rank fell in."""

    value: float  # what histogram_quantile answers: interpolated, or a bucket bound
    lower: float  # 0 for a first bucket with a positive bound (Prometheus' assumption), else -inf
    upper: float  # math.inf for the +Inf bucket

    @property
    def resolution(self) -> Resolution:
        # A bucket from 0 bounds the value's size only from above: 0.6 ms and 0.29 s are the same
        # observation to a first bucket of 0.3 s, so interpolating inside it invents a figure.
        if math.isinf(self.upper):
            return Resolution.LOWER_BOUND
        if self.lower <= 0:
            return Resolution.UPPER_BOUND
        return Resolution.MEASURED

    @property
    def measured(self) -> float | None:
        """The interpolated value where it is a measurement (as fine as its bucket), else None."""
        return self.value if self.resolution is Resolution.MEASURED else None

    @property
    def bound(self) -> float:
        """The bound the buckets give: ``upper`` for UPPER_BOUND, ``lower`` for LOWER_BOUND."""
        return self.lower if self.resolution is Resolution.LOWER_BOUND else self.upper


def histogram_quantile(q: float, buckets: Buckets) -> float | None:
    """Prometheus' ``histogram_quantile`` over cumulative ``(upper bound, count)`` buckets.

    None where Prometheus answers NaN: no observations, fewer than two buckets, or no +Inf bucket. Its
    answer can be a bound rather than a measurement; ``bucket_quantile`` says which.
    """
    found = bucket_quantile(q, buckets)
    return None if found is None else found.value


def bucket_quantile(q: float, buckets: Buckets) -> BucketQuantile | None:
    """``histogram_quantile``'s answer with the bucket it came from; None where it answers None."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile must be within [0, 1], got {q}")
    ordered = _monotonic(sorted(buckets))
    if len(ordered) < 2 or ordered[-1][0] != math.inf or ordered[-1][1] == 0:
        return None
    rank = q * ordered[-1][1]
    # The first finite bucket whose cumulative count reaches the rank (sort.Search in Prometheus).
    index = bisect.bisect_left([count for _, count in ordered[:-1]], rank)
    if index == len(ordered) - 1:
        highest = ordered[-2][0]
        return BucketQuantile(highest, highest, math.inf)
    upper = ordered[index][0]
    if index == 0 and upper <= 0:
        return BucketQuantile(upper, -math.inf, upper)
    value = _interpolate(ordered, index, rank)
    lower = ordered[index - 1][0] if index > 0 else 0.0
    return None if value is None else BucketQuantile(value, lower, upper)


def _interpolate(ordered: Buckets, index: int, rank: float) -> float | None:
    start, below = (ordered[index - 1][0], ordered[index - 1][1]) if index > 0 else (0.0, 0.0)
    end, count = ordered[index]
    in_bucket = count - below
    if in_bucket == 0:
        return None  # only q == 0 over an empty first bucket gets here: 0/0, NaN in Prometheus
    return start + (end - start) * ((rank - below) / in_bucket)


def _monotonic(buckets: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Counts forced non-decreasing, as Prometheus does for buckets scraped at slightly different times."""
    out: list[tuple[float, float]] = []
    highest = 0.0
    for bound, count in buckets:
        highest = max(highest, count)
        out.append((bound, highest))
    return out


@dataclass(frozen=True)
class WindowFigures:
    """What happened at the engine between the first and last snapshot of a window."""

    kind: str
    start: float
    end: float
    increases: Mapping[Signal, float] = field(default_factory=dict)
    histograms: Mapping[Signal, HistogramData] = field(default_factory=dict)
    resets: int = 0

    @property
    def span_s(self) -> float:
        """Seconds between the first and the last snapshot."""
        return self.end - self.start

    def rate(self, signal: Signal) -> float | None:
        """Per-second increase of a counter signal over the window."""
        increase = self.increases.get(signal)
        if increase is None or self.span_s <= 0:
            return None
        return increase / self.span_s

    def quantile(self, signal: Signal, q: float) -> BucketQuantile | None:
        """The ``q`` quantile of a histogram signal's observations made within the window, with the
        bucket it fell in: ``.measured`` is None where the buckets give only a bound."""
        histogram = self.histograms.get(signal)
        return None if histogram is None else bucket_quantile(q, histogram.buckets)

    def mean(self, signal: Signal) -> float | None:
        """Exact mean of a histogram signal's observations in the window (from sum and count)."""
        histogram = self.histograms.get(signal)
        if histogram is None or histogram.count <= 0:
            return None
        return histogram.sum / histogram.count


def derive(snapshots: Sequence[EngineSnapshot]) -> WindowFigures:
    """Window figures from snapshots of one engine, oldest first (two or more)."""
    _check_window(snapshots)
    increases: dict[Signal, float] = {}
    histograms: dict[Signal, HistogramData] = {}
    resets = 0
    for signal, kind in SIGNAL_TYPES.items():
        if kind is SignalType.COUNTER:
            resets += _derive_counter(snapshots, signal, increases)
        elif kind is SignalType.HISTOGRAM:
            resets += _derive_histogram(snapshots, signal, histograms)
    first, last = snapshots[0], snapshots[-1]
    return WindowFigures(last.kind, first.at, last.at, increases, histograms, resets)


def _check_window(snapshots: Sequence[EngineSnapshot]) -> None:
    if len(snapshots) < 2:
        raise ValueError(f"a window needs at least two snapshots, got {len(snapshots)}")
    if any(b.at < a.at for a, b in itertools.pairwise(snapshots)):
        raise ValueError("snapshots must be in time order, oldest first")
    kinds = sorted({snapshot.kind for snapshot in snapshots})
    if len(kinds) > 1:
        raise ValueError(f"snapshots of one window come from different engines: {', '.join(kinds)}")


def _derive_counter(snapshots: Sequence[EngineSnapshot], signal: Signal, out: dict[Signal, float]) -> int:
    values = [v for v in (s.values.get(signal) for s in snapshots) if v is not None]
    if len(values) < 2:
        return 0
    out[signal], resets = counter_increase(values)
    return resets


def _derive_histogram(
    snapshots: Sequence[EngineSnapshot], signal: Signal, out: dict[Signal, HistogramData]
) -> int:
    readings = [h for h in (s.histograms.get(signal) for s in snapshots) if h is not None]
    if len(readings) < 2:
        return 0
    out[signal], resets = histogram_increase(readings)
    return resets


def client_minus_server_ttft(
    client_ttfts: Sequence[float], server_ttft: HistogramData, q: float = 0.5
) -> float | None:
    """Client-side TTFT quantile minus the engine's own TTFT quantile over the same window.

    What it means: time to first token that the engine's clock does not see. That is network and TLS
    time both ways, load balancers and gateways and their queues, the HTTP server's accept queue and
    whatever the API front end does before the engine stamps the request's arrival (vLLM stamps it
    when the request enters the engine's front end, so tokenization is partly inside), plus the time
    for the first SSE chunk to be flushed and read.

    Limits: a difference of two quantiles is not the quantile of per-request differences; the engine's
    histogram covers all its traffic while the client sample is only the probe's requests, so the two
    agree only when the probes are typical of the traffic; the server side is interpolated inside
    buckets (see the module docstring), so the gap is no finer than the bucket width around that
    quantile and can come out negative. Prefer ``client_minus_server_mean_ttft`` for small gaps: the
    server's mean is exact. None when either side has no observations, and when the server's quantile
    is only a bound (its first bucket or its +Inf bucket): a difference against a bound is no
    measurement of the gap.
    """
    found = bucket_quantile(q, server_ttft.buckets)
    server = None if found is None else found.measured
    client = percentile(client_ttfts, q * 100.0)
    if server is None or math.isnan(client):
        return None
    return client - server


def client_minus_server_mean_ttft(client_ttfts: Sequence[float], server_ttft: HistogramData) -> float | None:
    """Mean client TTFT minus the engine's mean TTFT (exact, from its sum and count); None if no data.

    Same meaning and population caveat as ``client_minus_server_ttft``, without the bucket resolution
    limit on the server side.
    """
    client = [value for value in client_ttfts if not math.isnan(value)]
    if not client or server_ttft.count <= 0:
        return None
    return math.fsum(client) / len(client) - server_ttft.sum / server_ttft.count
