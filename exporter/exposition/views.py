"""What the store hands its readers (the collector, the debug view, the health log): immutable
snapshots of a series, an engine and a histogram at one instant, and how an instant is shown; and the
two cumulative counts a series keeps whose snapshots those are (``Histogram``, ``Turn``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np

from exporter.engine.scrape import ScrapeResult
from exporter.engine.snapshot_window import SnapshotWindow
from exporter.evaluation import DeadlinePolicy
from exporter.exposition.window import Records
from exporter.stats.batch import FloatArray, IntArray
from exporter.stats.objectives import GoodputBounds, Objective
from exporter.streams.result import Outcome, ProbeResult


@dataclass(frozen=True)
class HistogramCounts:
    """A histogram at one instant: ``(upper bound, cumulative count)`` ending at +Inf, and the sum."""

    buckets: tuple[tuple[float, int], ...]
    sum: float

    @property
    def count(self) -> int:
        return self.buckets[-1][1]


@dataclass(frozen=True)
class RecentResult:
    """One request as the debug view lists it."""

    at: float
    outcome: Outcome
    http_status: int | None
    error: str | None
    output_tokens: int
    ttft_s: float | None
    e2e_s: float | None
    unreliable: bool


def iso(unix_s: float) -> str:
    """``2026-11-23T18:40:12Z``: how the log, the debug view and the index show an instant."""
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class SeriesView:
    """A (target, module) at one instant, for the collector: copies and immutable references only."""

    target: str
    module: str
    policy: DeadlinePolicy
    goodput: GoodputBounds | None
    slos: tuple[Objective, ...]
    requests: Mapping[Outcome, int]
    retries: int
    unreliable: int  # requests whose timings the client flagged unreliable
    output_tokens: int
    deadlines: Mapping[str, float]
    deadlines_missed: Mapping[str, float]
    good_requests: int | None
    last_success: float | None
    last_run_ok: float | None  # share of the latest run's requests that ended ok; None before a run
    histograms: Mapping[str, HistogramCounts]  # by spec name of names.PROBE_HISTOGRAMS' kind
    fluidity: Mapping[str, HistogramCounts]  # by tier
    records: Records
    turns: Mapping[str, TurnCounts] = field(default_factory=dict)  # by names.TURN_KINDS


@dataclass(frozen=True)
class EngineView:
    """A target's engine state at one instant."""

    target: str
    last: ScrapeResult | None
    window: SnapshotWindow


@dataclass(frozen=True)
class TurnCounts:
    """First turns or follow-ups of one series: TTFT (its count: completed requests), prompt and cached
    tokens."""

    ttft: HistogramCounts
    prompt_tokens: int
    cached_tokens: int


class Histogram:
    """Cumulative bucket counts of one histogram series (mutable; owned by the store)."""

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._counts: IntArray = np.zeros(len(bounds) + 1, dtype=np.int64)  # last: above every bound
        self.sum = 0.0

    def observe(self, values: FloatArray) -> None:
        """Add observations; NaN values (the figure does not apply to that request) are skipped."""
        values = values[~np.isnan(values)]
        # side="left": a value equal to a bound belongs to that bound's bucket (le = "less or equal").
        slots = np.searchsorted(np.asarray(self.bounds), values, side="left")
        self._counts += np.bincount(slots, minlength=len(self._counts))
        self.sum += math.fsum(values.tolist())

    def snapshot(self) -> HistogramCounts:
        """Cumulative counts per upper bound, ending at +Inf."""
        cumulative = np.cumsum(self._counts)
        bounds = (*self.bounds, math.inf)
        return HistogramCounts(tuple(zip(bounds, cumulative.tolist(), strict=True)), self.sum)


@dataclass
class Turn:
    ttft: Histogram
    prompt_tokens: int = 0
    cached_tokens: int = 0

    def add(self, results: Sequence[ProbeResult], ttfts: FloatArray) -> None:
        self.ttft.observe(ttfts)
        for result in results:
            if result.prompt_tokens_cached is not None and result.prompt_tokens_reported:
                self.prompt_tokens += result.prompt_tokens_reported
                self.cached_tokens += result.prompt_tokens_cached

    def snapshot(self) -> TurnCounts:
        return TurnCounts(self.ttft.snapshot(), self.prompt_tokens, self.cached_tokens)


def turn_kind(result: ProbeResult) -> str:
    """``first`` or ``followup``: the bounded ``turn`` label of a result."""
    return "followup" if result.turn > 1 else "first"
