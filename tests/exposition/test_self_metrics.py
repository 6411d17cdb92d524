"""Tests of SelfMetrics, the exporter's own health metrics."""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry

from exporter import __version__
from exporter.engine.scrape import ScrapeFailure
from exporter.exposition.self_metrics import SelfMetrics
from tests.exposition.builders import engine_snapshot, scrape_failed, scraped


def test_build_info() -> None:
    registry = CollectorRegistry()
    SelfMetrics(registry)
    labels = {"version": __version__, "python_version": platform.python_version()}
    assert registry.get_sample_value("fluidity_exporter_build_info", labels) == 1


def test_job_counters_start_at_zero_and_count() -> None:
    registry = CollectorRegistry()
    metrics = SelfMetrics(registry)
    metrics.track_job("probe/a/chat")
    job = {"job_id": "probe/a/chat"}
    for name in ("runs", "errors", "misfires", "skipped"):
        assert registry.get_sample_value(f"fluidity_exporter_job_{name}_total", job) == 0
    metrics.job_ran("probe/a/chat")
    metrics.job_ran("probe/a/chat")
    metrics.job_failed("probe/a/chat")
    metrics.job_misfired("probe/a/chat")
    metrics.job_was_skipped("probe/a/chat")
    assert registry.get_sample_value("fluidity_exporter_job_runs_total", job) == 2
    assert registry.get_sample_value("fluidity_exporter_job_errors_total", job) == 1
    assert registry.get_sample_value("fluidity_exporter_job_misfires_total", job) == 1
    assert registry.get_sample_value("fluidity_exporter_job_skipped_total", job) == 1
    metrics.forget_job("probe/a/chat")
    metrics.forget_job("never-scheduled")
    assert registry.get_sample_value("fluidity_exporter_job_runs_total", job) is None


def test_engine_scrapes_and_errors_by_reason() -> None:
    registry = CollectorRegistry()
    metrics = SelfMetrics(registry)
    metrics.engine_scraped("llm", scraped(engine_snapshot(1.0, 1.0)))
    metrics.engine_scraped("llm", scrape_failed(ScrapeFailure.TIMEOUT))
    target = {"target": "llm"}
    assert registry.get_sample_value("fluidity_exporter_engine_scrapes_total", target) == 2
    assert (
        registry.get_sample_value(
            "fluidity_exporter_engine_scrape_errors_total", {**target, "reason": "timeout"}
        )
        == 1
    )
    for reason in ("connect_error", "http_status", "parse_error"):
        labels = {**target, "reason": reason}
        assert registry.get_sample_value("fluidity_exporter_engine_scrape_errors_total", labels) == 0
    metrics.forget_target("llm")
    assert registry.get_sample_value("fluidity_exporter_engine_scrapes_total", target) is None


def test_loop_lag_histogram() -> None:
    registry = CollectorRegistry()
    metrics = SelfMetrics(registry)
    metrics.observe_loop_lag(0.002)
    metrics.observe_loop_lag(0.2)
    metrics.observe_loop_lag(-0.001)  # a clock quirk is no lag
    assert registry.get_sample_value("fluidity_exporter_event_loop_lag_seconds_count") == 3
    assert registry.get_sample_value("fluidity_exporter_event_loop_lag_seconds_bucket", {"le": "0.003"}) == 2


def test_config_reload_status() -> None:
    registry = CollectorRegistry()
    metrics = SelfMetrics(registry)
    metrics.config_loaded(True, 1_700_000_000.0)
    assert registry.get_sample_value("fluidity_exporter_config_last_reload_successful") == 1
    metrics.config_loaded(False, 1_700_000_100.0)
    assert registry.get_sample_value("fluidity_exporter_config_last_reload_successful") == 0
    stamp = registry.get_sample_value("fluidity_exporter_config_last_reload_success_timestamp_seconds")
    assert stamp == 1_700_000_000.0  # a failed reload keeps the last success's time
