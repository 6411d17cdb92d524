"""``TrafficStats``: observed records to the traffic families, evaluated as probes are."""

from __future__ import annotations

from exporter.evaluation import EvaluationSpec
from exporter.exposition import traffic
from exporter.exposition.traffic import TrafficStats
from exporter.probe.result import Outcome, ProbeResult
from exporter.settings.buckets import DEFAULT_BUCKETS
from exporter.traffic.record import SKIP_REASONS, Observed
from tests.support.daemon import samples, value


def observed(gap: float, outcome: Outcome = Outcome.OK) -> Observed:
    times = [0.99 + gap * i for i in range(5)]  # TTFT just inside the 1 s prefill deadline: no slack
    result = ProbeResult(
        "chat", outcome, sent_at=0.0, token_times=times, token_counts=[1] * 5, finished_at=times[-1]
    )
    return Observed(result, "m")


def test_records_become_the_probes_shapes() -> None:
    stats = TrafficStats(EvaluationSpec(), DEFAULT_BUCKETS)
    stats.add(observed(0.010))
    stats.add(observed(0.080))  # misses every strict (25 ms) and medium (50 ms) decode deadline
    stats.add(observed(0.010, Outcome.STREAM_ABORTED))
    series = samples(stats.render_text({"not_llm": 2}, 1))
    labels = {"model": "m", "api": "chat"}
    assert value(series, "fluidity_traffic_requests_total", outcome="ok", **labels) == 2
    assert value(series, "fluidity_traffic_requests_total", outcome="stream_aborted", **labels) == 1
    assert value(series, "fluidity_traffic_requests_total", outcome="rate_limited", **labels) == 0
    assert value(series, "fluidity_traffic_ttft_seconds_count", **labels) == 2  # completed ones only
    assert value(series, "fluidity_traffic_tbt_seconds_count", **labels) == 8
    missed = {
        t: value(series, "fluidity_traffic_deadlines_missed_total", tier=t, **labels)
        for t in ("strict", "relaxed")
    }
    assert missed["strict"] >= 4 and missed["relaxed"] == 0
    assert value(series, "fluidity_traffic_fluidity_index_count", tier="medium", **labels) == 2
    for reason in SKIP_REASONS:
        assert (
            value(series, "fluidity_traffic_streams_skipped_total", reason=reason)
            == (reason == "not_llm") * 2
        )
    assert value(series, "fluidity_traffic_streams_in_flight") == 1


def test_waiting_records_are_bounded(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(traffic, "PENDING", 3)
    stats = TrafficStats(EvaluationSpec(), DEFAULT_BUCKETS)
    for _ in range(7):
        stats.add(observed(0.01))
    assert len(stats._pending) == 1  # two batches of 3 evaluated as they filled
