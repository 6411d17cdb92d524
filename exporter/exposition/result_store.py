"""Where probe results and engine scrapes land: cumulative counters and histograms, bounded windows.

Per (target, module) the store keeps

* cumulative counters (requests by outcome, output tokens, deadlines and missed deadlines per tier, good
  requests) and cumulative histogram bucket counts, updated once per ``add`` and never reset, so that
  Prometheus' ``rate()`` and ``histogram_quantile`` see ordinary counters;
* ``Records``: a few numbers per recent request, bounded by age (``max_age_s``, the longest window)
  AND by count (``max_records``), from which the window gauges are computed on scrape;
* the last ``recent_results`` results, and separately the last ``recent_failures`` failures, so that a
  ``?debug=true`` view still shows failures after many successes (blackbox_exporter's history).

Per target it keeps (``ScrapeViews``) the engine's ``SnapshotWindow`` (bounded by its own ``max_items``)
and the latest scrape result, and the same apart for the gateway in front of it. Nothing grows with
the daemon's uptime: the number of series is the number of configured (target, module) pairs, and
``retain`` drops the ones a reload removed.

All the math is ``exporter.stats`` (through ``exporter.evaluation.measure``, the same path the
one-shot report takes); the store only accumulates. A run's rows are built in ``run_rows``; the bounds
above are ``store_limits.StoreLimits``.

Concurrency: the store is meant to be touched by one asyncio event loop only (probe jobs call ``add``,
aiohttp's ``/metrics`` handler calls ``collect`` synchronously), so no lock is needed: nothing here
awaits, so no call interleaves with another. Scrape-side readers only take references to immutable
``Records`` and copies of the small counter dicts. Calling it from other threads is not supported.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

import numpy as np

from exporter.engine.scrape import ScrapeResult
from exporter.engine.snapshot_window import SnapshotWindow
from exporter.evaluation import DeadlinePolicy, EvaluationSpec, Measured, measure
from exporter.exposition.names import TURN_KINDS
from exporter.exposition.run_rows import good_flags, run_rows
from exporter.exposition.store_limits import StoreLimits
from exporter.exposition.views import EngineView, Histogram, RecentResult, SeriesView, Turn, turn_kind
from exporter.exposition.window import (
    PUBLISHED_QUANTILES,
    ProbeWindow,
    PublishedQuantiles,
    Records,
    probe_window,
)
from exporter.settings.buckets import DEFAULT_BUCKETS, HistogramBuckets
from exporter.stats.batch import FloatArray
from exporter.stats.objectives import GoodputBounds, Objective
from exporter.streams.result import Outcome, ProbeResult
from exporter.streams.result import e2e as result_e2e
from exporter.streams.result import ttft as result_ttft

Clock = Callable[[], float]
SeriesKey = tuple[str, str]


# The latency histograms by kind; keys are the ``HistogramBuckets`` fields.
LATENCY_KINDS = ("ttft", "tbt", "tpot", "e2e", "normalized_latency")


@dataclass
class _Series:
    """One (target, module): its cumulative counts, its rows and its recent results, and the window
    figures computed from those rows, cached until the rows change."""

    target: str
    module: str
    policy: DeadlinePolicy
    goodput: GoodputBounds | None
    slos: tuple[Objective, ...]
    buckets: HistogramBuckets
    limits: StoreLimits
    requests: dict[Outcome, int] = field(default_factory=lambda: dict.fromkeys(Outcome, 0))
    retries: int = 0
    unreliable: int = 0
    output_tokens: int = 0
    deadlines: dict[str, float] = field(default_factory=dict)
    deadlines_missed: dict[str, float] = field(default_factory=dict)
    good_requests: int | None = None
    last_success: float | None = None
    last_run_ok: float | None = None
    histograms: dict[str, Histogram] = field(default_factory=dict)
    fluidity: dict[str, Histogram] = field(default_factory=dict)
    turns: dict[str, Turn] = field(default_factory=dict)
    records: Records = field(init=False)
    recent: deque[RecentResult] = field(init=False)
    recent_failures: deque[RecentResult] = field(init=False)
    version: int = 0  # bumped whenever the rows change, so window figures can be cached
    window_cache: dict[float, tuple[tuple[object, ...], ProbeWindow]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.records = Records.empty(tuple(self.policy.decode_tiers))
        self.recent = deque(maxlen=self.limits.recent_results)
        self.recent_failures = deque(maxlen=self.limits.recent_failures)
        self.histograms = {kind: Histogram(getattr(self.buckets, kind)) for kind in LATENCY_KINDS}
        self.turns = {kind: Turn(Histogram(self.buckets.ttft)) for kind in TURN_KINDS}

    def set_rows(self, records: Records) -> None:
        self.records = records
        self.version += 1
        self.window_cache.clear()

    def judge_by(
        self, policy: DeadlinePolicy, goodput: GoodputBounds | None, slos: tuple[Objective, ...]
    ) -> None:
        """Judge the next runs by these; other deadlines or bounds restart the rows (never the counts)."""
        if (self.policy, self.goodput) != (policy, goodput):
            self.policy, self.goodput = policy, goodput
            self.set_rows(Records.empty(tuple(policy.decode_tiers)))
        self.slos = slos

    def current_rows(self, now: float) -> Records:
        """The rows of the longest window at ``now``, older ones dropped for good."""
        rows = self.records.since(now - self.limits.max_age_s)
        if rows is not self.records:
            self.set_rows(rows)
        return rows

    def window(
        self,
        duration_s: float,
        now: float,
        quantiles: PublishedQuantiles,
    ) -> ProbeWindow:
        """Figures over the rows of the last ``duration_s`` seconds, cached until those rows change."""
        records = self.current_rows(now)
        start = now - duration_s
        first = int(np.searchsorted(records.at, start, side="left"))
        key = (self.version, first, quantiles)
        cached = self.window_cache.get(duration_s)
        if cached is not None and cached[0] == key:
            return cached[1]
        figures = probe_window(
            records.since(start),
            self.policy,
            self.slos,
            self.goodput,
            quantiles,
        )
        if len(self.window_cache) > 16:  # a caller asking for ever new durations must not grow it
            self.window_cache.clear()
        self.window_cache[duration_s] = (key, figures)
        return figures

    def recent_results(self) -> list[RecentResult]:
        """The last few results and the older failures kept longer, newest first."""
        merged = {id(r): r for r in (*self.recent_failures, *self.recent)}
        return sorted(merged.values(), key=lambda r: r.at, reverse=True)

    def view(self, now: float) -> SeriesView:
        """This series at ``now``: copies of its counts, references to its immutable rows."""
        return SeriesView(
            target=self.target,
            module=self.module,
            policy=self.policy,
            goodput=self.goodput,
            slos=self.slos,
            requests=dict(self.requests),
            retries=self.retries,
            unreliable=self.unreliable,
            output_tokens=self.output_tokens,
            deadlines=dict(self.deadlines),
            deadlines_missed=dict(self.deadlines_missed),
            good_requests=self.good_requests,
            last_success=self.last_success,
            last_run_ok=self.last_run_ok,
            histograms={kind: h.snapshot() for kind, h in self.histograms.items()},
            fluidity={tier: h.snapshot() for tier, h in self.fluidity.items()},
            records=self.current_rows(now),
            turns={kind: turn.snapshot() for kind, turn in self.turns.items()},
        )


@dataclass
class ScrapeViews:
    """The latest scrape of each target's engine (or of the gateway in front of it), and the window of
    its snapshots, bounded by ``max_age_s`` and ``max_items``."""

    max_age_s: float
    max_items: int
    views: dict[str, EngineView] = field(default_factory=dict)

    def add(self, target: str, result: ScrapeResult) -> None:
        """The scrape's snapshot joins the target's window; its status is the latest."""
        view = self.views.get(target)
        window = view.window if view is not None else SnapshotWindow(self.max_age_s, self.max_items)
        if result.snapshot is not None:
            window.add(result.snapshot)
        self.views[target] = EngineView(target, result, window)

    def retain(self, targets: AbstractSet[str]) -> None:
        """Drop every target not in ``targets``."""
        self.views = {t: v for t, v in self.views.items() if t in targets}


class ResultStore:
    """Cumulative probe metrics and bounded rolling windows per (target, module); engine state per target."""

    def __init__(
        self,
        limits: StoreLimits | None = None,
        buckets: HistogramBuckets = DEFAULT_BUCKETS,
        clock: Clock = time.time,
        *,
        fluid_rate: bool = True,
    ) -> None:
        self.limits = limits or StoreLimits()
        self.buckets = buckets
        self.clock = clock  # unix seconds: row ages and the last-success timestamp
        # Whether rows keep each request's minimum decode deadline, which the window's fluid token rate
        # is computed from (``run_rows``): the costliest figure of a request to evaluate.
        self.fluid_rate = fluid_rate
        self._series: dict[SeriesKey, _Series] = {}
        self._engines = ScrapeViews(self.limits.max_age_s, self.limits.engine_max_items)
        # The gateway in front of a target, scraped apart from its engine.
        self._gateways = ScrapeViews(self.limits.max_age_s, self.limits.engine_max_items)

    def add(
        self,
        target: str,
        module: str,
        results: Sequence[ProbeResult],
        spec: EvaluationSpec,
        now: float | None = None,
    ) -> tuple[Measured, FloatArray]:
        """Store one probe run's results, judged by ``spec`` (its deadlines, and its goodput bounds and
        objectives where it has them); returns how they were judged (``measure``'s figures and
        ``good_flags``), for a caller that counts more of them (the traffic observer's families).

        A run whose policy or goodput bounds differ from the series' previous ones restarts the series'
        rows (window figures never mix requests judged by different deadlines); counters and
        histograms carry on.
        """
        now = self.clock() if now is None else now
        policy, goodput = spec.deadlines, spec.goodput
        series = self._series_for(target, module, policy, goodput, spec.slos)
        measured = measure(results, spec)
        completed = {id(r) for r in measured.results}
        failed = [r for r in results if id(r) not in completed]
        good = good_flags(goodput, measured, policy, len(failed))
        _accumulate(series, measured, good, now)
        _accumulate_turns(series, results, measured)
        # Rows stay in time order even if a caller's clock steps back: ``Records.since`` bisects on it.
        stamp = max(now, float(series.records.at[-1])) if len(series.records) else now
        rows = run_rows(measured, failed, good, policy, stamp, fluid_rate=self.fluid_rate)
        kept = series.records.since(now - self.limits.max_age_s).append(rows)
        series.set_rows(kept.newest(self.limits.max_records))
        for result in results:
            _remember(series, result, now)
        if results:
            series.last_run_ok = sum(r.outcome is Outcome.OK for r in results) / len(results)
        return measured, good

    def add_engine_scrape(self, target: str, result: ScrapeResult) -> None:
        """Record an engine scrape: its snapshot joins the target's window; its status is the latest."""
        self._engines.add(target, result)

    def add_gateway_scrape(self, target: str, result: ScrapeResult) -> None:
        """Record a scrape of the gateway in front of a target, kept apart from the engine's."""
        self._gateways.add(target, result)

    def retain(
        self,
        keys: Iterable[SeriesKey],
        targets: Iterable[str] | None = None,
        gateways: Iterable[str] | None = None,
    ) -> None:
        """Drop every series not in ``keys``, every engine not in ``targets`` and every gateway not in
        ``gateways`` (default: ``targets``), e.g. after a reload."""
        keep = set(keys)
        self._series = {key: s for key, s in self._series.items() if key in keep}
        engines = set(targets) if targets is not None else {target for target, _ in keep}
        self._engines.retain(engines)
        self._gateways.retain(set(gateways) if gateways is not None else engines)

    def series(self, now: float | None = None) -> list[SeriesView]:
        """Every (target, module) at ``now`` (default: the clock), rows older than the longest window gone."""
        now = self.clock() if now is None else now
        return [s.view(now) for s in self._series.values()]

    def versions(self) -> list[tuple[SeriesKey, int]]:
        """Every (target, module) with a number that changes whenever a run is stored for it."""
        return [(key, series.version) for key, series in self._series.items()]

    def view(self, key: SeriesKey, now: float | None = None) -> SeriesView:
        """One (target, module) at ``now``, as ``series`` gives it."""
        return self._series[key].view(self.clock() if now is None else now)

    def engines(self) -> list[EngineView]:
        """Every target's engine state."""
        return list(self._engines.views.values())

    def gateways(self) -> list[EngineView]:
        """The state of every target's gateway (only targets with ``gateway_metrics``)."""
        return list(self._gateways.views.values())

    def window(
        self,
        target: str,
        module: str,
        duration_s: float,
        now: float | None = None,
        quantiles: PublishedQuantiles = PUBLISHED_QUANTILES,
    ) -> ProbeWindow | None:
        """Figures over the rows of the last ``duration_s`` seconds (None for an unknown series).

        Cached until rows are added or age out of the window, so repeated scrapes cost little.
        """
        if not 0 < duration_s <= self.limits.max_age_s:
            raise ValueError(f"window duration_s must be in (0, {self.limits.max_age_s}], got {duration_s!r}")
        series = self._series.get((target, module))
        if series is None:
            return None
        now = self.clock() if now is None else now
        return series.window(duration_s, now, quantiles)

    def recent(self, target: str, module: str) -> list[RecentResult]:
        """The recent results of a series, newest first: the last few, plus older failures kept longer."""
        series = self._series.get((target, module))
        return [] if series is None else series.recent_results()

    def _series_for(
        self,
        target: str,
        module: str,
        policy: DeadlinePolicy,
        goodput: GoodputBounds | None,
        slos: tuple[Objective, ...],
    ) -> _Series:
        series = self._series.get((target, module))
        if series is None:
            series = _Series(target, module, policy, goodput, slos, self.buckets, self.limits)
            self._series[(target, module)] = series
        series.judge_by(policy, goodput, slos)
        return series


def _accumulate(series: _Series, measured: Measured, good: FloatArray, now: float) -> None:
    latency = measured.latency
    series.output_tokens += measured.batch.token_count
    series.histograms["ttft"].observe(latency.ttft)
    series.histograms["tbt"].observe(latency.tbt)
    series.histograms["tpot"].observe(latency.tpot)
    series.histograms["e2e"].observe(latency.e2e)
    series.histograms["normalized_latency"].observe(latency.normalized_latency)
    for tier, accounting in measured.tiers.items():
        histogram = series.fluidity.setdefault(tier, Histogram(series.buckets.fluidity))
        histogram.observe(accounting.fluidity)
        series.deadlines[tier] = series.deadlines.get(tier, 0.0) + float(accounting.total.sum())
        series.deadlines_missed[tier] = series.deadlines_missed.get(tier, 0.0) + float(
            accounting.missed.sum()
        )
    if series.goodput is not None:
        series.good_requests = (series.good_requests or 0) + int(np.nansum(good))
    if measured.results:
        series.last_success = now


def _accumulate_turns(series: _Series, results: Sequence[ProbeResult], measured: Measured) -> None:
    kinds = np.array([turn_kind(r) for r in measured.results], dtype=object)
    for kind, turn in series.turns.items():
        turn.add([r for r in results if turn_kind(r) == kind], measured.latency.ttft[kinds == kind])


def _remember(series: _Series, result: ProbeResult, now: float) -> None:
    series.requests[result.outcome] += 1
    series.retries += result.retries
    series.unreliable += result.unreliable
    entry = RecentResult(
        at=now,
        outcome=result.outcome,
        http_status=result.http_status,
        error=result.error,
        output_tokens=result.output_tokens,
        ttft_s=result_ttft(result),
        e2e_s=result_e2e(result),
        unreliable=result.unreliable,
    )
    series.recent.append(entry)
    if not result.ok:
        series.recent_failures.append(entry)
