"""The blackbox-style ``/probe?target=&module=`` answer: a fresh registry with one probe's metrics, or
with only its failure when it never finished."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from exporter.evaluation import EvaluationSpec
from exporter.exposition import names
from exporter.exposition.collector import FluidityCollector
from exporter.exposition.families import Families
from exporter.exposition.result_store import ResultStore
from exporter.exposition.store_limits import StoreLimits
from exporter.settings.buckets import DEFAULT_BUCKETS, HistogramBuckets
from exporter.streams.result import ProbeResult


class _ProbeOutcome(Collector):
    """``fluidity_probe_success`` and ``fluidity_probe_duration_seconds`` of one ``/probe`` answer."""

    def __init__(self, labels: tuple[str, str], failure: str | None, duration_s: float | None) -> None:
        self._labels, self._failure, self._duration_s = labels, failure, duration_s

    def collect(self) -> Iterator[Metric]:
        out = Families()
        out.add(names.PROBE_SUCCESS, self._labels, 1.0 if self._failure is None else 0.0)
        if self._duration_s is not None:
            out.add(names.PROBE_DURATION, self._labels, self._duration_s)
        if self._failure is not None:
            out.add(names.PROBE_FAILURE, (*self._labels, self._failure), 1.0)
        yield from out


def failed_probe_registry(
    target: str, module: str, reason: str, duration_s: float | None = None
) -> CollectorRegistry:
    """The ``/probe`` answer for a probe that never finished (timed out, or was not allowed to run):
    ``fluidity_probe_success 0`` and the reason, as blackbox_exporter answers a failed probe."""
    registry = CollectorRegistry()
    registry.register(_ProbeOutcome((target, module), reason, duration_s))
    return registry


@dataclass(frozen=True)
class FinishedProbe:
    """One ``/probe`` run that finished: its series, its results and how long it took."""

    target: str
    module: str
    results: Sequence[ProbeResult]
    duration_s: float | None = None


def probe_registry(
    probe: FinishedProbe,
    spec: EvaluationSpec,
    buckets: HistogramBuckets = DEFAULT_BUCKETS,
    now: float | None = None,
) -> CollectorRegistry:
    """A fresh registry with only this probe's metrics (blackbox_exporter's ``/probe``).

    The same families as ``/metrics`` for this (target, module), counted over this probe alone; the
    window gauges carry ``window="probe"`` and cover exactly its requests. Added around them, as
    blackbox_exporter does: ``fluidity_probe_success`` (1 when every request completed) and,
    when the probe's ``duration_s`` is given, ``fluidity_probe_duration_seconds``.
    """
    at = time.time() if now is None else now  # one instant: every row is in the one window
    results, series = probe.results, (probe.target, probe.module)
    limits = StoreLimits(max_age_s=1.0, max_records=max(len(results), 1))
    store = ResultStore(limits, buckets, clock=lambda: at)
    store.add(*series, results, spec, at)
    collector = FluidityCollector(store, {names.PROBE_WINDOW: limits.max_age_s}, clock=lambda: at)
    registry = CollectorRegistry()
    registry.register(collector)
    failed = next((result.outcome.value for result in results if not result.ok), None)
    failure = failed if results else "no_requests"
    registry.register(_ProbeOutcome(series, failure, probe.duration_s))
    return registry
