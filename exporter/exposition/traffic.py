"""The traffic observer's families: what real user streams showed, in the probes' shapes.

Records come from the observer (``exporter.traffic``) as each exchange ends and wait in a bounded list;
they are evaluated in batches (``exporter.evaluation.measure``, under ``traffic.slo``: the probes'
definitions) into cumulative histograms and counters, at the latest when a scrape asks. A record past
the list's bound makes the batch run at once, so memory stays bounded whatever the scrape interval.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from exporter.evaluation import EvaluationSpec, measure
from exporter.exposition import names, render
from exporter.exposition.families import Families
from exporter.exposition.views import Histogram
from exporter.probe.result import Outcome
from exporter.settings.buckets import HistogramBuckets
from exporter.traffic.record import SKIP_REASONS, Observed

PENDING = 4096  # records waiting to be evaluated: ~2 ms of numpy per batch, at most this many stamps lists


@dataclass
class _Series:
    ttft: Histogram
    tbt: Histogram
    fluidity: dict[str, Histogram] = field(default_factory=dict)
    deadlines: Counter[str] = field(default_factory=Counter)  # by tier
    missed: Counter[str] = field(default_factory=Counter)  # by tier
    outcomes: Counter[Outcome] = field(default_factory=Counter)


class TrafficStats:
    """Cumulative figures of observed requests, per (model, api)."""

    def __init__(self, spec: EvaluationSpec, buckets: HistogramBuckets) -> None:
        self.spec = spec
        self.buckets = buckets
        self._pending: list[Observed] = []
        self._series: dict[tuple[str, str], _Series] = {}

    def add(self, observed: Observed) -> None:
        """One finished request (the observer's sink)."""
        self._pending.append(observed)
        if len(self._pending) >= PENDING:
            self.flush()

    def flush(self) -> None:
        """Evaluate the waiting records into the cumulative figures."""
        pending, self._pending = self._pending, []
        by_series: dict[tuple[str, str], list[Observed]] = {}
        for observed in pending:
            by_series.setdefault((observed.model, observed.result.api), []).append(observed)
        for key, records in by_series.items():
            self._accumulate(self._get(key), records)

    def _get(self, key: tuple[str, str]) -> _Series:
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series(Histogram(self.buckets.ttft), Histogram(self.buckets.tbt))
        return series

    def _accumulate(self, series: _Series, records: list[Observed]) -> None:
        series.outcomes.update(r.result.outcome for r in records)
        measured = measure([r.result for r in records], self.spec)
        series.ttft.observe(measured.latency.ttft)
        series.tbt.observe(measured.latency.tbt)
        for tier, accounting in measured.tiers.items():
            series.fluidity.setdefault(tier, Histogram(self.buckets.fluidity)).observe(accounting.fluidity)
            series.deadlines[tier] += int(accounting.total.sum())
            series.missed[tier] += int(accounting.missed.sum())

    def families(self, skipped: Mapping[str, int], in_flight: int) -> Families:
        """Every traffic family now (the waiting records evaluated first); every outcome and reason is
        exported from the start, at 0."""
        self.flush()
        out = Families()
        for (model, api), series in sorted(self._series.items()):
            for outcome in Outcome:
                out.add(names.TRAFFIC_REQUESTS, (model, api, outcome.value), series.outcomes[outcome])
            out.histogram(names.TRAFFIC_TTFT, (model, api), series.ttft.snapshot())
            out.histogram(names.TRAFFIC_TBT, (model, api), series.tbt.snapshot())
            for tier, histogram in series.fluidity.items():
                out.histogram(names.TRAFFIC_FLUIDITY, (model, api, tier), histogram.snapshot())
                out.add(names.TRAFFIC_DEADLINES, (model, api, tier), series.deadlines[tier])
                out.add(names.TRAFFIC_DEADLINES_MISSED, (model, api, tier), series.missed[tier])
        for reason in SKIP_REASONS:
            out.add(names.TRAFFIC_SKIPPED, (reason,), skipped.get(reason, 0))
        out.add(names.TRAFFIC_IN_FLIGHT, (), in_flight)
        return out

    def render_text(self, skipped: Mapping[str, int], in_flight: int) -> str:
        """The families as /metrics text."""
        return render.render(self.families(skipped, in_flight))
