"""Tests of FluidityCollector and probe_registry through a CollectorRegistry of their own."""

from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from exporter.engine.catalogue import GATEWAY_CATALOGUE, Signal
from exporter.engine.derive import client_minus_server_mean_ttft, client_minus_server_ttft, histogram_quantile
from exporter.engine.snapshot import EngineSnapshot, HistogramData, parse_exposition
from exporter.evaluation import EvaluationSpec, measure
from exporter.exposition import names
from exporter.exposition.collector import FluidityCollector
from exporter.exposition.probe_registry import FinishedProbe, probe_registry
from exporter.exposition.result_store import ResultStore
from exporter.exposition.self_metrics import SelfMetrics
from exporter.exposition.store_limits import StoreLimits
from exporter.exposition.window import PublishedQuantiles
from exporter.report.summary import summarize
from exporter.stats.batch import IntervalBatch
from exporter.stats.fluidity import evaluate, fluid_token_rate
from exporter.stats.objectives import GoodputBounds, parse_objective
from exporter.streams.result import Outcome, intervals
from tests.engine import fixtures as engine_fixtures
from tests.exposition.builders import (
    POLICY,
    engine_snapshot,
    failed,
    histogram,
    mixed_run,
    scrape_failed,
    scraped,
    smooth,
    stalled,
)

NOW = 1_000.0
SERIES = {"target": "llm", "module": "chat"}
SLOS = (parse_objective("ttft:p99<=0.5"), parse_objective("fluidity:p99>=0.99"))


def registry_of(
    store: ResultStore, windows: dict[str, float] | None = None, now: float = NOW
) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(FluidityCollector(store, windows or {"5m": 300.0}, clock=lambda: now))
    return registry


def filled_store() -> ResultStore:
    store = ResultStore(clock=lambda: NOW)
    store.add("llm", "chat", mixed_run(), EvaluationSpec(POLICY, SLOS, GoodputBounds(ttft=0.3)), NOW - 10)
    return store


def test_histogram_samples_equal_stats() -> None:
    results = mixed_run()
    registry = registry_of(filled_store())
    measured = measure(results, EvaluationSpec(POLICY))
    ttft = measured.latency.ttft
    get = registry.get_sample_value
    assert get("fluidity_probe_ttft_seconds_count", SERIES) == len(ttft)
    assert get("fluidity_probe_ttft_seconds_sum", SERIES) == pytest.approx(float(ttft.sum()), rel=1e-12)
    assert get("fluidity_probe_ttft_seconds_bucket", {**SERIES, "le": "0.3"}) == np.count_nonzero(ttft <= 0.3)
    assert get("fluidity_probe_ttft_seconds_bucket", {**SERIES, "le": "+Inf"}) == len(ttft)
    tbt = measured.latency.tbt
    assert get("fluidity_probe_tbt_seconds_count", SERIES) == len(tbt)
    assert get("fluidity_probe_tbt_seconds_bucket", {**SERIES, "le": "0.05"}) == np.count_nonzero(tbt <= 0.05)
    strict = measured.tiers["strict"].fluidity
    labels = {**SERIES, "tier": "strict"}
    assert get("fluidity_probe_fluidity_index_count", labels) == len(strict)
    assert get("fluidity_probe_fluidity_index_bucket", {**labels, "le": "0.9"}) == np.count_nonzero(
        strict <= 0.9
    )
    assert get("fluidity_probe_fluidity_index_sum", labels) == pytest.approx(float(strict.sum()), rel=1e-12)


def test_counters_by_outcome_and_per_tier_deadlines() -> None:
    results = mixed_run()
    registry = registry_of(filled_store())
    get = registry.get_sample_value
    assert get("fluidity_probe_requests_total", {**SERIES, "outcome": "ok"}) == 5
    assert get("fluidity_probe_requests_total", {**SERIES, "outcome": "http_status"}) == 1
    assert get("fluidity_probe_requests_total", {**SERIES, "outcome": "stream_aborted"}) == 1
    assert get("fluidity_probe_requests_total", {**SERIES, "outcome": "rate_limited"}) == 0
    assert get("fluidity_probe_retries_total", SERIES) == sum(r.retries for r in results) > 0
    assert get("fluidity_probe_unreliable_requests_total", SERIES) == sum(r.unreliable for r in results) == 1
    done = [r for r in results if r.ok]
    batch = IntervalBatch.from_sequences(intervals(r) for r in done)
    assert get("fluidity_probe_output_tokens_total", SERIES) == batch.token_count
    for tier, dd in POLICY.decode_tiers.items():
        accounting = evaluate(batch, POLICY.prefill_deadline, dd)
        assert get("fluidity_probe_deadlines_total", {**SERIES, "tier": tier}) == accounting.total.sum()
        assert (
            get("fluidity_probe_deadlines_missed_total", {**SERIES, "tier": tier}) == accounting.missed.sum()
        )
    assert get("fluidity_probe_good_requests_total", SERIES) == 2  # TTFT <= 0.3 s: 0.2 and 0.25
    assert get("fluidity_probe_last_success_timestamp_seconds", SERIES) == NOW - 10


def test_window_gauges_equal_stats_on_the_window_requests() -> None:
    results = mixed_run()
    registry = registry_of(filled_store())
    get = registry.get_sample_value
    window = {**SERIES, "window": "5m"}
    done = [r for r in results if r.ok]
    batch = IntervalBatch.from_sequences(intervals(r) for r in done)
    for tier, dd in POLICY.decode_tiers.items():
        accounting = evaluate(batch, POLICY.prefill_deadline, dd)
        assert (
            get("fluidity_window_service_level_ratio", {**window, "tier": tier}) == accounting.service_level
        )
        # p1 of 5 requests: the value all of them reach, i.e. the lowest.
        p1 = get("fluidity_window_fluidity_index", {**window, "tier": tier, "percentile": "1"})
        assert p1 == accounting.fluidity.min()
    expected_rate = fluid_token_rate(batch, POLICY.target_fluidity, POLICY.percentile)
    assert get("fluidity_window_fluid_tokens_per_second", window) == expected_rate
    assert get("fluidity_window_requests", {**window, "outcome": "ok"}) == 5
    assert get("fluidity_window_requests", {**window, "outcome": "stream_aborted"}) == 1
    assert get("fluidity_window_goodput_ratio", window) == pytest.approx(2 / 7)
    # 2 of the 7 requests failed: at an infinite TTFT they sink a p99 that the 5 completed ones meet.
    assert get("fluidity_window_slo_met", {**window, "slo": "ttft:p99<=0.5"}) == 0.0
    assert get("fluidity_window_slo_met", {**window, "slo": "fluidity:p99>=0.99"}) == 0.0
    assert get("fluidity_window_probe_lateness_seconds", {**window, "percentile": "99"}) == 0.002


SLOS_NOT_ON_GAPS = tuple(
    parse_objective(text)
    for text in ("ttft:p99<=0.5", "ttft:p50<=0.5", "ttft:p50<=0.1", "fluidity:p50>=0.5", "e2e:p90<=5")
)


@pytest.mark.parametrize("failures", [0, 1, 2, 6])
def test_window_slo_verdicts_are_the_bench_report_verdicts(failures: int) -> None:
    """The same requests and objectives give the same verdicts on /metrics as in ``bench``'s summary
    (a failed request at the worst value); TBT objectives differ by design (longest gap per request
    here, pooled gaps there), so they are left out."""
    results = [smooth(), smooth(60, 0.045, 0.35), stalled(), *(failed() for _ in range(failures))]
    store = ResultStore(clock=lambda: NOW)
    store.add("llm", "chat", results, EvaluationSpec(POLICY, SLOS_NOT_ON_GAPS), NOW - 10)
    get = registry_of(store).get_sample_value
    spec = EvaluationSpec(POLICY, SLOS_NOT_ON_GAPS)
    report = summarize(results, measure(results, spec), spec, duration_s=10.0)["slos"]
    window = {**SERIES, "window": "5m"}
    verdicts = {r["slo"]: get("fluidity_window_slo_met", {**window, "slo": r["slo"]}) for r in report}
    assert verdicts == {r["slo"]: float(r["met"]) for r in report}
    assert verdicts["ttft:p50<=0.1"] == 0.0  # never met: the comparison sees both verdicts
    assert verdicts["ttft:p99<=0.5"] == (1.0 if failures == 0 else 0.0)


def test_a_window_of_failures_alone_misses_every_slo() -> None:
    store = ResultStore(clock=lambda: NOW)
    store.add("llm", "chat", [failed(), failed(Outcome.TTFT_TIMEOUT)], EvaluationSpec(POLICY, SLOS), NOW - 10)
    get = registry_of(store).get_sample_value
    window = {**SERIES, "window": "5m"}
    assert [get("fluidity_window_slo_met", {**window, "slo": str(slo)}) for slo in SLOS] == [0.0, 0.0]
    assert get("fluidity_window_service_level_ratio", {**window, "tier": "medium"}) is None  # none completed


def test_window_gauges_follow_the_clock() -> None:
    store = filled_store()
    assert (
        registry_of(store, now=NOW + 400).get_sample_value(
            "fluidity_window_requests", {**SERIES, "window": "5m", "outcome": "ok"}
        )
        == 0
    )
    later = registry_of(store, now=NOW + 400)
    assert (
        later.get_sample_value("fluidity_window_fluid_tokens_per_second", {**SERIES, "window": "5m"}) is None
    )
    # The cumulative series never go away.
    assert later.get_sample_value("fluidity_probe_requests_total", {**SERIES, "outcome": "ok"}) == 5


def test_several_windows_and_series() -> None:
    store = ResultStore(clock=lambda: NOW)
    store.add("llm", "chat", [smooth()], EvaluationSpec(POLICY), now=NOW - 1_000)
    store.add("llm", "chat", [stalled()], EvaluationSpec(POLICY), now=NOW - 10)
    store.add("llm", "code", [failed()], EvaluationSpec(POLICY), now=NOW - 10)
    registry = registry_of(store, {"5m": 300.0, "1h": 3_600.0})
    get = registry.get_sample_value
    assert get("fluidity_window_requests", {**SERIES, "window": "5m", "outcome": "ok"}) == 1
    assert get("fluidity_window_requests", {**SERIES, "window": "1h", "outcome": "ok"}) == 2
    code = {"target": "llm", "module": "code", "window": "1h"}
    assert get("fluidity_window_requests", {**code, "outcome": "http_status"}) == 1
    assert get("fluidity_window_service_level_ratio", {**code, "tier": "strict"}) is None


def test_engine_signals_reexported_with_target_and_window_figures_derived() -> None:
    store = filled_store()
    store.add_engine_scrape("llm", scraped(engine_snapshot(100.0, 1.0)))
    registry = registry_of(store)
    get = registry.get_sample_value
    assert get("fluidity_engine_scrape_success", {"target": "llm"}) == 1
    assert get("fluidity_engine_info", {"target": "llm", "engine": "vllm"}) == 1
    assert get("fluidity_engine_queue_depth", {"target": "llm"}) == 3.0
    assert get("fluidity_engine_kv_cache_usage_ratio", {"target": "llm"}) == 0.25
    assert get("fluidity_engine_preemptions_total", {"target": "llm"}) == 7.0
    assert (
        get("fluidity_engine_window_ttft_seconds", {"target": "llm", "window": "5m", "percentile": "50"})
        is None
    )

    second = engine_snapshot(160.0, 3.0)
    store.add_engine_scrape("llm", scraped(second))
    registry = registry_of(store)
    get = registry.get_sample_value
    assert get("fluidity_engine_generation_tokens_total", {"target": "llm"}) == 6_000.0
    # Window increase: (4, 12, 18, 20) -> p50 rank 10 lies in (0.1, 0.5].
    increase = ((0.05, 4.0), (0.1, 12.0), (0.5, 18.0), (1.0, 20.0), (math.inf, 20.0))
    p50 = get("fluidity_engine_window_ttft_seconds", {"target": "llm", "window": "5m", "percentile": "50"})
    assert p50 == histogram_quantile(0.5, increase)
    assert (
        get("fluidity_engine_window_itl_seconds", {"target": "llm", "window": "5m", "percentile": "99"})
        is not None
    )
    client = [float(v) for v in measure(mixed_run(), EvaluationSpec(POLICY)).latency.ttft]
    server = HistogramData(increase, 4.0, 20.0)
    window = {**SERIES, "window": "5m"}
    gap = get("fluidity_window_client_minus_server_ttft_seconds", {**window, "percentile": "50"})
    assert gap == pytest.approx(client_minus_server_ttft(client, server, 0.5))
    mean_gap = get("fluidity_window_client_minus_server_mean_ttft_seconds", window)
    assert mean_gap == pytest.approx(client_minus_server_mean_ttft(client, server))


def _vllm_queue_snapshot(
    at: float, requests: float, *, ttft_bounds: tuple[float, ...] = (0.01, 0.1)
) -> EngineSnapshot:
    """vLLM's queue-time and E2E histograms (first bucket 0.3 s), every request queued about 0.6 ms and
    finished within 0.3 s; every TTFT lies in the second of ``ttft_bounds`` (default: between two finite
    bounds, (0.01, 0.1])."""
    vllm_bounds = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0)
    all_first = [requests] * len(vllm_bounds)
    ttft = histogram((*ttft_bounds, 1.0), [0.0, requests, requests], 0.05 * requests)
    return EngineSnapshot(
        kind="vllm",
        at=at,
        histograms={
            Signal.SERVER_QUEUE_SECONDS: histogram(vllm_bounds, all_first, 0.0006 * requests),
            Signal.SERVER_E2E_SECONDS: histogram(vllm_bounds, all_first, 0.2 * requests),
            Signal.SERVER_TTFT_SECONDS: ttft,
        },
    )


def test_quantiles_in_the_first_bucket_are_published_as_upper_bounds_only() -> None:
    store = filled_store()
    store.add_engine_scrape("llm", scraped(_vllm_queue_snapshot(NOW - 60, 0.0)))
    store.add_engine_scrape("llm", scraped(_vllm_queue_snapshot(NOW - 5, 100.0)))
    collector = FluidityCollector(store, {"5m": 300.0}, clock=lambda: NOW)
    registry = CollectorRegistry()
    registry.register(collector)
    get = registry.get_sample_value
    for percentile in ("50", "90", "99"):
        labels = {"target": "llm", "window": "5m", "percentile": percentile}
        # Prometheus would answer 0.15 s, 0.27 s, 0.297 s: figures that look measured. None is published.
        assert get("fluidity_engine_window_queue_seconds", labels) is None
        assert get("fluidity_engine_window_e2e_seconds", labels) is None
        assert get("fluidity_engine_window_queue_bound_seconds", {**labels, "bound": "upper"}) == 0.3
        assert get("fluidity_engine_window_e2e_bound_seconds", {**labels, "bound": "upper"}) == 0.3
        assert get("fluidity_engine_window_queue_bound_seconds", {**labels, "bound": "lower"}) is None
    # A median between two finite bounds, (0.01, 0.1], stays a measurement, with no bound beside it.
    p50 = {"target": "llm", "window": "5m", "percentile": "50"}
    assert get("fluidity_engine_window_ttft_seconds", p50) == pytest.approx(0.055)
    assert get("fluidity_engine_window_ttft_bound_seconds", {**p50, "bound": "upper"}) is None
    # The rendered page says the same: no queue-time percentile line, the bound with its label.
    parsed = _parsed(collector.render_text())
    assert "fluidity_engine_window_queue_seconds" not in parsed
    labels = (("bound", "upper"), ("percentile", "50"), ("target", "llm"), ("window", "5m"))
    assert ("fluidity_engine_window_queue_bound_seconds", labels, 0.3) in parsed[
        "fluidity_engine_window_queue_bound_seconds"
    ]
    assert parsed == _parsed(generate_latest(registry).decode())


def test_no_client_minus_server_percentile_against_an_engine_bound() -> None:
    store = filled_store()
    # TTFT buckets (0, 0.1]: the engine's p50 is only "at most 0.1 s", so no percentile gap exists.
    for at, requests in ((NOW - 60, 0.0), (NOW - 5, 100.0)):
        store.add_engine_scrape("llm", scraped(_vllm_queue_snapshot(at, requests, ttft_bounds=(0.0, 0.1))))
    get = registry_of(store).get_sample_value
    window = {**SERIES, "window": "5m"}
    assert get("fluidity_window_client_minus_server_ttft_seconds", {**window, "percentile": "50"}) is None
    p50 = {"target": "llm", "window": "5m", "percentile": "50"}
    assert get("fluidity_engine_window_ttft_bound_seconds", {**p50, "bound": "upper"}) == 0.1
    assert get("fluidity_window_client_minus_server_mean_ttft_seconds", window) is not None  # exact


def test_failed_engine_scrape_hides_stale_engine_values() -> None:
    store = filled_store()
    store.add_engine_scrape("llm", scraped(engine_snapshot(100.0, 1.0)))
    store.add_engine_scrape("llm", scraped(engine_snapshot(160.0, 2.0)))
    store.add_engine_scrape("llm", scrape_failed())
    registry = registry_of(store)
    assert registry.get_sample_value("fluidity_engine_scrape_success", {"target": "llm"}) == 0
    assert registry.get_sample_value("fluidity_engine_queue_depth", {"target": "llm"}) is None
    assert registry.get_sample_value("fluidity_engine_info", {"target": "llm", "engine": "vllm"}) is None
    window = {**SERIES, "window": "5m", "percentile": "50"}
    assert registry.get_sample_value("fluidity_window_client_minus_server_ttft_seconds", window) is None


def test_probe_registry_holds_only_that_probe() -> None:
    store = filled_store()  # a daemon's store with other data must not leak into /probe
    store.add("other", "chat", [smooth()], EvaluationSpec(POLICY), now=NOW)
    results = [smooth(), stalled(), failed()]
    registry = probe_registry(FinishedProbe("llm", "code", results, 2.5), EvaluationSpec(POLICY, SLOS))
    families = list(text_string_to_metric_families(generate_latest(registry).decode()))
    labels = {(s.labels.get("target"), s.labels.get("module")) for f in families for s in f.samples}
    assert labels == {("llm", "code")}
    assert {f.name for f in families} <= {s.name.removesuffix("_total") for s in names.ALL}
    get = registry.get_sample_value
    code = {"target": "llm", "module": "code"}
    assert get("fluidity_probe_success", code) == 0.0  # one request failed
    assert get("fluidity_probe_duration_seconds", code) == 2.5
    assert get("fluidity_probe_requests_total", {**code, "outcome": "ok"}) == 2
    assert get("fluidity_probe_ttft_seconds_count", code) == 2
    batch = IntervalBatch.from_sequences(intervals(r) for r in results[:2])
    rate = get("fluidity_window_fluid_tokens_per_second", {**code, "window": names.PROBE_WINDOW})
    assert rate == fluid_token_rate(batch)
    ok = probe_registry(FinishedProbe("llm", "code", [smooth()]), EvaluationSpec(POLICY))
    assert ok.get_sample_value("fluidity_probe_success", code) == 1.0
    assert ok.get_sample_value("fluidity_probe_duration_seconds", code) is None


def full_exposition() -> bytes:
    store = filled_store()
    store.add("llm", "code", [failed(Outcome.RATE_LIMITED)], EvaluationSpec(POLICY), now=NOW)
    store.add_engine_scrape("llm", scraped(engine_snapshot(100.0, 1.0)))
    store.add_engine_scrape("llm", scraped(engine_snapshot(160.0, 2.0)))
    registry = registry_of(store, {"5m": 300.0, "1h": 3_600.0})
    metrics = SelfMetrics(registry)
    metrics.track_job("probe/llm/chat")
    metrics.job_ran("probe/llm/chat")
    metrics.observe_loop_lag(0.004)
    metrics.engine_scraped("llm", scrape_failed())
    metrics.config_loaded(True, NOW)
    return generate_latest(registry)


def test_text_exposition_parses_back() -> None:
    text = full_exposition().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["fluidity_probe_ttft_seconds"].type == "histogram"
    assert families["fluidity_probe_requests"].type == "counter"
    assert families["fluidity_window_fluidity_index"].type == "gauge"
    assert families["fluidity_engine_preemptions"].type == "counter"
    documented = {spec.name.removesuffix("_total") for spec in names.ALL}
    created = {name for name in families if name.endswith("_created")}  # prometheus_client's own
    assert set(families) - created <= documented
    for family in families.values():
        assert family.name.startswith("fluidity_")


def test_collected_families_match_their_specs() -> None:
    registry = CollectorRegistry()
    store = filled_store()
    registry.register(FluidityCollector(store, {"5m": 300.0}, clock=lambda: NOW))
    specs = {spec.name.removesuffix("_total"): spec for spec in names.COLLECTED}
    for family in registry.collect():
        spec = specs[family.name]
        assert family.type == spec.type
        assert family.documentation == spec.help
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == set(spec.labels), family.name


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)"
)
def test_promtool_check_metrics_reports_nothing() -> None:
    checked = subprocess.run(
        ["promtool", "check", "metrics"],
        input=full_exposition(),
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    assert checked.stdout.decode().strip() == "" and checked.stderr.decode().strip() == ""


def test_describe_does_not_collect() -> None:
    class Exploding(ResultStore):
        def series(self, now: float | None = None) -> list:  # type: ignore[type-arg, override]
            raise AssertionError("register() must not run a collect")

    registry = CollectorRegistry(auto_describe=True)
    registry.register(FluidityCollector(Exploding(), {"5m": 300.0}))


@pytest.mark.parametrize(
    ("windows", "kwargs", "message"),
    [
        ({"2h": 7_200.0}, {}, 'window "2h": 7200.0 s must be > 0 and at most'),
        ({"5m": 300.0}, {"fluidity": (1.5,)}, "fluidity quantiles: 1.5 is not a quantile"),
        ({"5m": 300.0}, {"lateness": (0.0,)}, r"lateness quantiles: 0.0 is not a quantile in \(0, 1\]"),
        ({"5m": 300.0}, {"client_ttft": 2.0}, r"client TTFT quantiles: 2.0 is not a quantile in \[0, 1\]"),
    ],
)
def test_collector_arguments_are_validated(windows: dict[str, float], kwargs: dict, message: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=message):
        FluidityCollector(
            ResultStore(StoreLimits(max_age_s=3_600.0)), windows, quantiles=PublishedQuantiles(**kwargs)
        )


def _parsed(text: str) -> dict[str, list[tuple[str, tuple[tuple[str, str], ...], float]]]:
    return {
        f.name: sorted(
            (s.name, tuple(sorted(s.labels.items())), s.value)
            for s in f.samples
            if not s.name.endswith("_created")
        )
        for f in text_string_to_metric_families(text)
    }


def test_fast_text_equals_prometheus_clients_exposition() -> None:
    store = filled_store()
    store.add("llm", "code", [smooth(), stalled()], EvaluationSpec(POLICY), NOW - 5)
    store.add_engine_scrape("llm", scraped(engine_snapshot(NOW - 20, scale=1)))
    store.add_engine_scrape("llm", scraped(engine_snapshot(NOW - 5, scale=2)))
    collector = FluidityCollector(store, {"5m": 300.0, "1h": 3600.0}, clock=lambda: NOW)
    registry = CollectorRegistry()
    registry.register(collector)
    expected = _parsed(generate_latest(registry).decode())
    first = collector.render_text()
    assert _parsed(first) == expected
    assert collector.render_text() == first  # served from the per-series cache, unchanged
    store.add("llm", "chat", [smooth()], EvaluationSpec(POLICY, SLOS, GoodputBounds(ttft=0.3)), NOW - 1)
    refreshed = _parsed(collector.render_text())  # a new run invalidates that series' cached text
    assert refreshed == _parsed(generate_latest(registry).decode()) and refreshed != expected


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool comes with Debian's prometheus package"
)
def test_promtool_accepts_the_fast_text() -> None:
    collector = FluidityCollector(filled_store(), {"5m": 300.0}, clock=lambda: NOW)
    check = subprocess.run(
        ["promtool", "check", "metrics"],
        input=collector.render_text(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), (
        check.stdout + check.stderr
    )


def _scaled(snapshot: EngineSnapshot, at: float, factor: float) -> EngineSnapshot:
    """``snapshot`` as if every counter and histogram had grown ``factor``-fold by ``at``."""
    histograms = {
        signal: HistogramData(tuple((b, c * factor) for b, c in h.buckets), h.sum * factor, h.count * factor)
        for signal, h in snapshot.histograms.items()
    }
    values = {signal: value * factor for signal, value in snapshot.values.items()}
    return EngineSnapshot(snapshot.kind, at, values, histograms, snapshot.sources)


def _engine_and_gateway_store() -> ResultStore:
    """The probes' own view, vLLM 0.13 behind llm-d's endpoint picker, each scraped twice."""
    store = filled_store()
    engine = parse_exposition(engine_fixtures.VLLM_0_13, at=0.0)
    gateway = parse_exposition(engine_fixtures.LLM_D_EPP, at=0.0, catalogue=GATEWAY_CATALOGUE)
    for at, factor in ((NOW - 60, 1.0), (NOW - 5, 3.0)):
        store.add_engine_scrape("llm", scraped(_scaled(engine, at, factor)))
        store.add_gateway_scrape("llm", scraped(_scaled(gateway, at, factor)))
    return store


def test_gateway_view_sits_beside_the_engines_and_the_probes() -> None:
    store = _engine_and_gateway_store()
    get = registry_of(store).get_sample_value
    target, p50 = {"target": "llm"}, {"target": "llm", "window": "5m", "percentile": "50"}
    assert get("fluidity_gateway_info", {"target": "llm", "gateway": "llm-d-epp"}) == 1
    assert get("fluidity_engine_info", {"target": "llm", "engine": "vllm"}) == 1
    assert get("fluidity_gateway_scrape_success", target) == 1
    # Latest values, 3x the fixture's: requests summed over fairness ids, violations over types.
    assert get("fluidity_gateway_requests_total", target) == 300.0
    assert get("fluidity_gateway_request_errors_total", target) == 9.0
    assert get("fluidity_gateway_slo_violations_total", target) == 18.0
    assert get("fluidity_gateway_running_requests", target) == 21.0
    # The window's increase is 2x the fixture, so its quantiles are the fixture's own: the gateway's
    # streaming TTFT (80 requests: 20 <= 0.1 s, 40 more <= 0.2 s) and the engine's TTFT and TPOT.
    gateway_ttft = histogram_quantile(0.5, ((0.1, 20.0), (0.2, 60.0), (math.inf, 80.0)))
    assert get("fluidity_gateway_window_ttft_seconds", p50) == pytest.approx(gateway_ttft) == 0.15
    engine_ttft = histogram_quantile(0.5, ((0.1, 1.0), (0.25, 3.0), (math.inf, 4.0)))
    assert get("fluidity_engine_window_ttft_seconds", p50) == pytest.approx(engine_ttft)
    engine_tpot = histogram_quantile(0.5, ((0.01, 1.0), (0.025, 4.0), (math.inf, 4.0)))
    assert get("fluidity_engine_window_tpot_seconds", p50) == pytest.approx(engine_tpot)
    # The gateway's TPOT, ITL and E2E medians lie in their first buckets (half of the requests at most
    # 0.02 s, 0.02 s, 5 s): only the bound is published, never Prometheus' answer as a measurement.
    upper = {**p50, "bound": "upper"}
    assert get("fluidity_gateway_window_tpot_seconds", p50) is None
    assert get("fluidity_gateway_window_tpot_bound_seconds", upper) == pytest.approx(0.02)
    assert get("fluidity_gateway_window_itl_seconds", p50) is None
    assert get("fluidity_gateway_window_itl_bound_seconds", upper) == pytest.approx(0.02)
    assert get("fluidity_gateway_window_e2e_seconds", p50) is None
    assert get("fluidity_gateway_window_e2e_bound_seconds", upper) == pytest.approx(5.0)
    # Its p90 TTFT is past 0.2 s, in +Inf: above 0.2 s is all the buckets say.
    p90 = {**p50, "percentile": "90"}
    assert get("fluidity_gateway_window_ttft_seconds", p90) is None
    assert get("fluidity_gateway_window_ttft_bound_seconds", {**p90, "bound": "lower"}) == pytest.approx(0.2)
    # And the probes' own TTFT of the same target, with the engine's (not the gateway's) gap to it.
    assert get("fluidity_probe_ttft_seconds_count", SERIES) is not None
    window = {**SERIES, "window": "5m"}
    client = [float(v) for v in measure(mixed_run(), EvaluationSpec(POLICY)).latency.ttft]
    doubled = HistogramData(((0.1, 2.0), (0.25, 6.0), (math.inf, 8.0)), 1.6, 8.0)
    gap = get("fluidity_window_client_minus_server_mean_ttft_seconds", window)
    assert gap == pytest.approx(client_minus_server_mean_ttft(client, doubled))
    # No gateway signal leaks into the engine's families, nor the reverse.
    assert get("fluidity_engine_queue_depth", target) == 6.0
    assert get("fluidity_gateway_queue_depth", target) is None
    # vLLM 0.13's queue histogram holds every request in its first bucket, 0.3 s: a bound, not a p50.
    assert get("fluidity_engine_window_queue_bound_seconds", {**p50, "bound": "upper"}) == 0.3
    assert get("fluidity_gateway_window_queue_seconds", p50) is None


def test_gateway_families_match_their_specs_and_the_fast_text() -> None:
    store = _engine_and_gateway_store()
    collector = FluidityCollector(store, {"5m": 300.0}, clock=lambda: NOW)
    registry = CollectorRegistry()
    registry.register(collector)
    specs = {spec.name.removesuffix("_total"): spec for spec in names.COLLECTED}
    seen = set()
    for family in registry.collect():
        spec = specs[family.name]
        seen.add(spec.name)
        assert family.type == spec.type and family.documentation == spec.help
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == set(spec.labels), family.name
    gateway_specs = {spec.name for spec in names.COLLECTED if spec.name.startswith("fluidity_gateway_")}
    assert gateway_specs <= seen  # every gateway family is exported from the fixture
    assert _parsed(collector.render_text()) == _parsed(generate_latest(registry).decode())


def test_failed_gateway_scrape_hides_the_gateway_only() -> None:
    store = _engine_and_gateway_store()
    store.add_gateway_scrape("llm", scrape_failed())
    get = registry_of(store).get_sample_value
    assert get("fluidity_gateway_scrape_success", {"target": "llm"}) == 0
    assert get("fluidity_gateway_requests_total", {"target": "llm"}) is None
    assert get("fluidity_engine_scrape_success", {"target": "llm"}) == 1
    store.retain([("llm", "chat")], ["llm"], gateways=[])  # a reload that drops gateway_metrics
    get = registry_of(store).get_sample_value
    assert get("fluidity_gateway_scrape_success", {"target": "llm"}) is None
    assert get("fluidity_engine_scrape_success", {"target": "llm"}) == 1


def test_first_turns_and_follow_ups_are_apart_under_a_bounded_turn_label() -> None:
    first, follow, later, cold = smooth(ttft=0.3), smooth(ttft=0.05), smooth(ttft=0.07), failed()
    first.prompt_tokens_reported, first.prompt_tokens_cached = 500, 0
    follow.turn, follow.prompt_tokens_reported, follow.prompt_tokens_cached = 2, 620, 496
    later.turn, later.prompt_tokens_reported, later.prompt_tokens_cached = 7, 700, 608
    store = ResultStore(clock=lambda: NOW)
    store.add("llm", "chat", [first, follow, later, cold], EvaluationSpec(POLICY), now=NOW - 10)
    registry = registry_of(store)

    def value(name: str, turn: str) -> float | None:
        return registry.get_sample_value(name, {**SERIES, "turn": turn})

    assert value("fluidity_probe_turn_ttft_seconds_count", "first") == 1  # the failed one did not complete
    assert value("fluidity_probe_turn_ttft_seconds_count", "followup") == 2
    assert value("fluidity_probe_turn_ttft_seconds_sum", "followup") == pytest.approx(0.12)
    assert value("fluidity_probe_turn_ttft_seconds_sum", "first") == pytest.approx(0.3)
    assert value("fluidity_probe_prompt_cached_tokens_total", "followup") == 496 + 608
    assert value("fluidity_probe_prompt_tokens_total", "followup") == 620 + 700
    assert value("fluidity_probe_prompt_tokens_total", "first") == 500
    turns = {s.labels["turn"] for f in registry.collect() for s in f.samples if "turn" in s.labels}
    assert turns == {"first", "followup"}  # never the turn number


def test_turn_families_are_exported_at_zero_before_any_session() -> None:
    registry = registry_of(filled_store())
    assert (
        registry.get_sample_value("fluidity_probe_turn_ttft_seconds_count", {**SERIES, "turn": "followup"})
        == 0
    )
    assert (
        registry.get_sample_value("fluidity_probe_prompt_cached_tokens_total", {**SERIES, "turn": "first"})
        == 0
    )


def test_the_latest_run_ok_ratio_is_held_until_the_next_run() -> None:
    store = ResultStore(clock=lambda: NOW)
    get = registry_of(store).get_sample_value
    assert get("fluidity_probe_last_run_ok_ratio", SERIES) is None  # no run yet: no state to hold
    store.add("llm", "chat", mixed_run(), EvaluationSpec(POLICY), NOW - 30)
    assert get("fluidity_probe_last_run_ok_ratio", SERIES) == pytest.approx(5 / 7)
    store.add("llm", "chat", [failed(), failed(Outcome.TTFT_TIMEOUT)], EvaluationSpec(POLICY), NOW - 20)
    assert get("fluidity_probe_last_run_ok_ratio", SERIES) == 0.0
    # Long after the run, with its rows gone from every window, the state is still the run's.
    assert (
        registry_of(store, now=NOW + 3600).get_sample_value("fluidity_probe_last_run_ok_ratio", SERIES) == 0.0
    )
