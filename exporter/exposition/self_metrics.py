"""The exporter's own health, by direct instrumentation: the one place that mutates metric objects.

Build info, scheduled job runs/errors/misfires/skips, event-loop lag, engine scrapes and their
failures, what prompt calibration cost each target, and configuration reload status. Everything else is collected on scrape from a snapshot
(``FluidityCollector``). Label values known in advance (every ``ScrapeFailure`` reason of a target,
the four job counters of a job) are created at zero so that ``rate()`` and ``increase()`` see the
first failure.
"""

from __future__ import annotations

import contextlib
import platform

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.registry import CollectorRegistry

from exporter import __version__
from exporter.engine.scrape import ScrapeFailure, ScrapeResult
from exporter.exposition import names
from exporter.exposition.names import MetricSpec
from exporter.settings.buckets import LOOP_LAG_BUCKETS


def _counter(spec: MetricSpec, registry: CollectorRegistry) -> Counter:
    return Counter(spec.name, spec.help, spec.labels, registry=registry)


def _gauge(spec: MetricSpec, registry: CollectorRegistry) -> Gauge:
    return Gauge(spec.name, spec.help, spec.labels, registry=registry)


class SelfMetrics:
    """The exporter's health metrics, registered on ``registry`` at construction."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        version: str = __version__,
        loop_lag_buckets: tuple[float, ...] = LOOP_LAG_BUCKETS,
    ) -> None:
        build = _gauge(names.BUILD_INFO, registry)
        build.labels(version, platform.python_version()).set(1)
        self.job_runs = _counter(names.JOB_RUNS, registry)
        self.job_errors = _counter(names.JOB_ERRORS, registry)
        self.job_misfires = _counter(names.JOB_MISFIRES, registry)
        self.job_skipped = _counter(names.JOB_SKIPPED, registry)
        spec = names.EVENT_LOOP_LAG
        self.loop_lag = Histogram(spec.name, spec.help, buckets=loop_lag_buckets, registry=registry)
        self.engine_scrapes = _counter(names.ENGINE_SCRAPES, registry)
        self.engine_scrape_errors = _counter(names.ENGINE_SCRAPE_ERRORS, registry)
        self.calibration_requests = _counter(names.CALIBRATION_REQUESTS, registry)
        self.calibration_seconds = _counter(names.CALIBRATION_SECONDS, registry)
        self.reload_successful = _gauge(names.CONFIG_RELOAD_SUCCESSFUL, registry)
        self.reload_timestamp = _gauge(names.CONFIG_RELOAD_TIMESTAMP, registry)

    def track_job(self, job_id: str) -> None:
        """Export a job's four counters at zero (call when the job is scheduled)."""
        for counter in (self.job_runs, self.job_errors, self.job_misfires, self.job_skipped):
            counter.labels(job_id)

    def forget_job(self, job_id: str) -> None:
        """Stop exporting a job that a reload removed."""
        for counter in (self.job_runs, self.job_errors, self.job_misfires, self.job_skipped):
            _remove(counter, job_id)

    def job_ran(self, job_id: str) -> None:
        """A scheduled run started."""
        self.job_runs.labels(job_id).inc()

    def job_failed(self, job_id: str) -> None:
        """A run raised: a bug of ours (the caller logs the traceback)."""
        self.job_errors.labels(job_id).inc()

    def job_misfired(self, job_id: str) -> None:
        """A run was dropped for starting later than its misfire grace time."""
        self.job_misfires.labels(job_id).inc()

    def job_was_skipped(self, job_id: str) -> None:
        """A run was skipped because the previous one still ran."""
        self.job_skipped.labels(job_id).inc()

    def observe_loop_lag(self, seconds: float) -> None:
        """One sample of how late the event loop woke up for a timer."""
        self.loop_lag.observe(max(seconds, 0.0))

    def track_target(self, target: str) -> None:
        """Export a target's scrape counters at zero, one error series per failure reason."""
        self.engine_scrapes.labels(target)
        for reason in ScrapeFailure:
            self.engine_scrape_errors.labels(target, reason.value)

    def track_calibration(self, target: str) -> None:
        """Export a calibrating target's calibration counters at zero."""
        self.calibration_requests.labels(target)
        self.calibration_seconds.labels(target)

    def calibrated(self, target: str, requests: int, seconds: float) -> None:
        """One calibration of ``target`` ended, having sent ``requests`` in ``seconds``."""
        self.calibration_requests.labels(target).inc(requests)
        self.calibration_seconds.labels(target).inc(seconds)

    def forget_target(self, target: str) -> None:
        """Stop exporting a target that a reload removed."""
        _remove(self.calibration_requests, target)
        _remove(self.calibration_seconds, target)
        _remove(self.engine_scrapes, target)
        for reason in ScrapeFailure:
            _remove(self.engine_scrape_errors, target, reason.value)

    def engine_scraped(self, target: str, result: ScrapeResult) -> None:
        """Count one scrape of ``target`` 's engine, and its failure if it failed."""
        self.track_target(target)
        self.engine_scrapes.labels(target).inc()
        if result.failure is not None:
            self.engine_scrape_errors.labels(target, result.failure.value).inc()

    def config_loaded(self, successful: bool, at: float) -> None:
        """A configuration load or reload ended; ``at`` is unix time."""
        self.reload_successful.set(1 if successful else 0)
        if successful:
            self.reload_timestamp.set(at)


def _remove(metric: Counter, *labels: str) -> None:
    with contextlib.suppress(KeyError):  # never exported: nothing to remove
        metric.remove(*labels)
