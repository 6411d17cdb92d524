"""``TrafficStats``: observed records to the traffic families, evaluated as probes are."""

from __future__ import annotations

import asyncio

import pytest

from exporter.evaluation import EvaluationSpec
from exporter.exposition import traffic_stats
from exporter.exposition.traffic_stats import ObserverHealth, TrafficStats
from exporter.settings.buckets import DEFAULT_BUCKETS
from exporter.stats.objectives import GoodputBounds
from exporter.streams.result import Outcome, ProbeResult, TokenSource
from exporter.traffic.record import SKIP_REASONS, Observed
from tests.support.daemon import samples, value

LABELS = {"model": "m", "api": "chat"}
WINDOWS = {"5m": 300.0, "1h": 3600.0}


def observed(
    gap: float,
    outcome: Outcome = Outcome.OK,
    *,
    prompt_tokens: int | None = None,
    body: int = 400,
    source: TokenSource = TokenSource.CHUNKS,
) -> Observed:
    times = [0.99 + gap * i for i in range(5)]  # TTFT just inside the 1 s prefill deadline: no slack
    result = ProbeResult(
        "chat", outcome, sent_at=0.0, token_times=times, token_counts=[1] * 5, finished_at=times[-1]
    )
    result.prompt_tokens_reported = prompt_tokens
    result.token_source = source
    return Observed(result, "m", request_bytes=body)


def stats(spec: EvaluationSpec | None = None, now: float = 1000.0) -> TrafficStats:
    return TrafficStats(spec or EvaluationSpec(), DEFAULT_BUCKETS, WINDOWS, clock=lambda: now)


def test_records_become_the_probes_shapes() -> None:
    figures = stats()
    figures.add(observed(0.010))
    figures.add(observed(0.080))  # misses every strict (25 ms) and medium (50 ms) decode deadline
    figures.add(observed(0.010, Outcome.STREAM_ABORTED))
    series = samples(figures.render_text(ObserverHealth({"not_llm": 2}, 1)))
    assert value(series, "fluidity_traffic_requests_total", outcome="ok", **LABELS) == 2
    assert value(series, "fluidity_traffic_requests_total", outcome="stream_aborted", **LABELS) == 1
    assert value(series, "fluidity_traffic_requests_total", outcome="rate_limited", **LABELS) == 0
    assert value(series, "fluidity_traffic_ttft_seconds_count", **LABELS) == 2  # completed ones only
    assert value(series, "fluidity_traffic_tbt_seconds_count", **LABELS) == 8
    missed = {
        t: value(series, "fluidity_traffic_deadlines_missed_total", tier=t, **LABELS)
        for t in ("strict", "relaxed")
    }
    assert missed["strict"] >= 4 and missed["relaxed"] == 0
    assert value(series, "fluidity_traffic_fluidity_index_count", tier="medium", **LABELS) == 2
    for reason in SKIP_REASONS:
        assert (
            value(series, "fluidity_traffic_streams_skipped_total", reason=reason)
            == (reason == "not_llm") * 2
        )
    assert value(series, "fluidity_traffic_streams_in_flight") == 1


def test_tpot_e2e_and_normalized_latency_are_the_probes_definitions() -> None:
    figures = stats()
    figures.add(observed(0.010))  # TTFT 0.99 s, then 4 gaps of 10 ms: E2E 1.03 s over 5 tokens
    series = samples(figures.render_text(ObserverHealth()))
    assert value(series, "fluidity_traffic_tpot_seconds_sum", **LABELS) == pytest.approx(0.010)
    assert value(series, "fluidity_traffic_e2e_seconds_sum", **LABELS) == pytest.approx(1.03)
    assert value(series, "fluidity_traffic_normalized_latency_seconds_sum", **LABELS) == pytest.approx(
        1.03 / 5
    )
    assert value(series, "fluidity_traffic_tpot_seconds_count", **LABELS) == 1


def test_goodput_counts_requests_and_their_tokens() -> None:
    # Without goodput bounds, good is fluid: the 80 ms gaps miss the medium tier's deadlines.
    figures = stats()
    figures.add(observed(0.010))
    figures.add(observed(0.080))
    figures.add(observed(0.010, Outcome.HTTP_STATUS))
    series = samples(figures.render_text(ObserverHealth()))
    assert value(series, "fluidity_traffic_good_requests_total", **LABELS) == 1
    assert value(series, "fluidity_traffic_good_output_tokens_total", **LABELS) == 5
    assert value(series, "fluidity_traffic_output_tokens_total", token_source="chunks", **LABELS) == 10
    assert value(series, "fluidity_traffic_output_tokens_total", token_source="token_ids", **LABELS) == 0
    # With bounds, the SLO's own: a TTFT bound of 0.5 s fails every one of them.
    strict = stats(EvaluationSpec(goodput=GoodputBounds(ttft=0.5)))
    strict.add(observed(0.010))
    assert (
        value(samples(strict.render_text(ObserverHealth())), "fluidity_traffic_good_requests_total", **LABELS)
        == 0
    )


def test_prompt_tokens_come_from_usage_else_from_the_body_s_length() -> None:
    figures = stats()
    figures.add(observed(0.010, body=400))  # nothing learnt yet: 0.25 tokens per byte -> 100
    figures.flush()
    figures.add(observed(0.010, prompt_tokens=50, body=500))  # 0.1 tokens per byte, learnt
    figures.add(observed(0.010, body=1000))  # estimated after it: 100
    series = samples(figures.render_text(ObserverHealth()))
    assert value(series, "fluidity_traffic_prompt_tokens_total", source="usage", **LABELS) == 50
    assert value(series, "fluidity_traffic_prompt_tokens_total", source="estimated", **LABELS) == 200


def test_windows_mirror_the_probes_window_gauges() -> None:
    figures = stats()
    for _ in range(3):
        figures.add(observed(0.010))
    figures.add(observed(0.010, Outcome.STREAM_ABORTED))
    series = samples(figures.render_text(ObserverHealth()))
    for window in WINDOWS:
        at = {**LABELS, "window": window}
        assert value(series, "fluidity_traffic_window_requests", outcome="ok", **at) == 3
        assert value(series, "fluidity_traffic_window_requests", outcome="stream_aborted", **at) == 1
        assert value(series, "fluidity_traffic_window_goodput_ratio", **at) == 0.75
        assert value(series, "fluidity_traffic_window_service_level_ratio", tier="medium", **at) == 1.0
        assert (
            value(series, "fluidity_traffic_window_fluidity_index", tier="medium", percentile="1", **at)
            == 1.0
        )
    assert not [key for key in series if "fluid_tokens" in key[0]]  # not searched for: see the module


def test_observer_health_is_exported_with_every_state() -> None:
    health = ObserverHealth(streams={"observed": 4, "probe": 1}, connections=2, last_message_unix_s=1.7e9)
    series = samples(stats().render_text(health))
    assert value(series, "fluidity_traffic_envoy_streams_total", state="observed") == 4
    assert value(series, "fluidity_traffic_envoy_streams_total", state="dropped") == 0
    assert value(series, "fluidity_traffic_envoy_connections") == 2
    assert value(series, "fluidity_traffic_last_message_timestamp_seconds") == 1.7e9


def test_an_unreliable_record_is_counted() -> None:
    figures = stats()
    record = observed(0.010)
    record.result.unreliable = True
    figures.add(record)
    series = samples(figures.render_text(ObserverHealth()))
    assert value(series, "fluidity_traffic_unreliable_requests_total", **LABELS) == 1


def test_waiting_records_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(traffic_stats, "PENDING", 3)
    figures = stats()
    for _ in range(7):
        figures.add(observed(0.01))
    assert len(figures._pending) == 1  # two batches of 3 evaluated as they filled


async def test_records_are_evaluated_in_slices_with_the_loop_let_run_between() -> None:
    figures = stats()
    for _ in range(3 * traffic_stats.SLICE + 5):
        figures.add(observed(0.01))
    waiting: list[int] = []  # what the loop's other tasks saw waiting, each turn they had
    for _ in range(6):
        await asyncio.sleep(0)
        waiting.append(len(figures._pending))
    assert waiting[0] < 3 * traffic_stats.SLICE + 5  # a slice ran, then the loop got its turn
    assert len(set(waiting)) >= 3  # one slice a turn, not the whole backlog at once
    assert waiting[-1] == 5  # fewer than a slice waits for the next add or the scrape
    series = samples(figures.render_text(ObserverHealth()))
    assert (
        value(series, "fluidity_traffic_requests_total", outcome="ok", **LABELS)
        == 3 * traffic_stats.SLICE + 5
    )
