"""Tests of ResultStore: cumulative histograms and counters against exporter.stats, bounded windows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from exporter.evaluation import DeadlinePolicy, EvaluationSpec, measure
from exporter.exposition.result_store import ResultStore
from exporter.exposition.store_limits import StoreLimits
from exporter.exposition.window import MIN_DECODE_DEADLINE
from exporter.settings.buckets import DEFAULT_BUCKETS, HistogramBuckets
from exporter.stats.batch import IntervalBatch
from exporter.stats.fluidity import evaluate, fluid_token_rate
from exporter.stats.latency import latency_batch
from exporter.stats.objectives import GoodputBounds
from exporter.streams.result import Outcome, intervals
from tests.exposition.builders import POLICY, failed, mixed_run, smooth, stalled


class FakeClock:
    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def expected_cumulative(values: np.ndarray, bounds: tuple[float, ...]) -> list[int]:
    values = values[~np.isnan(values)]
    return [int(np.count_nonzero(values <= b)) for b in bounds] + [len(values)]


def test_histograms_equal_stats_on_the_same_intervals() -> None:
    results = mixed_run()
    store = ResultStore(clock=FakeClock())
    store.add("t", "m", results, EvaluationSpec(POLICY), now=1_000.0)
    [view] = store.series()
    done = [r for r in results if r.ok and r.token_times]
    batch = IntervalBatch.from_sequences(intervals(r) for r in done)
    e2e = np.array([r.finished_at - r.sent_at for r in done])  # type: ignore[operator]
    latency = latency_batch(batch, e2e=e2e)
    for kind, values in {
        "ttft": latency.ttft,
        "tbt": latency.tbt,
        "tpot": latency.tpot,
        "e2e": latency.e2e,
        "normalized_latency": latency.normalized_latency,
    }.items():
        counts = view.histograms[kind]
        bounds = getattr(DEFAULT_BUCKETS, kind)
        assert [c for _, c in counts.buckets] == expected_cumulative(values, bounds), kind
        assert counts.sum == pytest.approx(float(np.nansum(values)), rel=1e-12), kind
    prefill = POLICY.prefill_deadlines(np.zeros(len(batch)))
    for tier, dd in POLICY.decode_tiers.items():
        fluidity = evaluate(batch, prefill, dd).fluidity
        counts = view.fluidity[tier]
        assert [c for _, c in counts.buckets] == expected_cumulative(fluidity, DEFAULT_BUCKETS.fluidity)
        assert counts.sum == pytest.approx(float(fluidity.sum()), rel=1e-12)


def test_counters_by_outcome_tokens_and_deadlines() -> None:
    results = mixed_run()
    store = ResultStore(clock=FakeClock())
    store.add("t", "m", results, EvaluationSpec(POLICY), now=1_000.0)
    store.add("t", "m", results, EvaluationSpec(POLICY), now=1_010.0)
    [view] = store.series()
    assert view.requests[Outcome.OK] == 10
    assert view.requests[Outcome.HTTP_STATUS] == 2
    assert view.requests[Outcome.STREAM_ABORTED] == 2
    assert view.requests[Outcome.RATE_LIMITED] == 0  # every outcome exported from the start
    measured = measure(results, EvaluationSpec(POLICY))
    assert view.output_tokens == 2 * measured.batch.token_count
    for tier, accounting in measured.tiers.items():
        assert view.deadlines[tier] == 2 * accounting.total.sum()
        assert view.deadlines_missed[tier] == 2 * accounting.missed.sum()
    assert view.deadlines_missed["strict"] > 0  # the stalled request did miss
    assert view.last_success == 1_010.0
    assert view.good_requests is None  # no goodput bounds configured


def test_good_requests_counts_requests_meeting_every_bound() -> None:
    results = [smooth(ttft=0.2), smooth(ttft=0.6), stalled(), failed()]
    store = ResultStore(clock=FakeClock())
    store.add(
        "t", "m", results, EvaluationSpec(POLICY, goodput=GoodputBounds(ttft=0.5, max_tbt=0.5)), now=1_000.0
    )
    [view] = store.series()
    assert view.good_requests == 1  # slow TTFT, a 1 s stall and a failure are not good


def test_last_success_only_when_a_request_completed() -> None:
    store = ResultStore(clock=FakeClock())
    store.add("t", "m", [failed()], EvaluationSpec(POLICY), now=1_000.0)
    assert store.series()[0].last_success is None


def test_windows_evict_by_time() -> None:
    clock = FakeClock(1_000.0)
    store = ResultStore(StoreLimits(max_age_s=600.0), clock=clock)
    store.add("t", "m", [smooth()], EvaluationSpec(POLICY), now=1_000.0)
    store.add("t", "m", [smooth(), failed()], EvaluationSpec(POLICY), now=1_300.0)
    clock.now = 1_350.0
    five_minutes = store.window("t", "m", 300.0)
    assert five_minutes is not None
    assert five_minutes.requests[Outcome.OK] == 1 and five_minutes.requests[Outcome.HTTP_STATUS] == 1
    ten = store.window("t", "m", 600.0)
    assert ten is not None and ten.requests[Outcome.OK] == 2
    clock.now = 1_601.0  # the first run is now older than max_age_s: its row is gone
    assert len(store.series()[0].records) == 2
    clock.now = 2_000.0
    assert len(store.series()[0].records) == 0
    empty = store.window("t", "m", 600.0)
    assert empty is not None and sum(empty.requests.values()) == 0
    assert empty.fluid_token_rate is None and not empty.fluidity and not empty.service_level


def test_windows_evict_by_count_newest_kept() -> None:
    store = ResultStore(StoreLimits(max_records=5), clock=FakeClock())
    for second in range(4):
        store.add("t", "m", [smooth(), failed()], EvaluationSpec(POLICY), now=1_000.0 + second)
    records = store.series(1_004.0)[0].records
    assert len(records) == 5
    assert records.at.tolist() == [1_001.0, 1_002.0, 1_002.0, 1_003.0, 1_003.0]


def test_memory_stays_bounded_over_100k_results() -> None:
    limits = StoreLimits(max_records=2_500, recent_results=10, recent_failures=20)
    clock = FakeClock()
    store = ResultStore(limits, clock=clock)
    run = [smooth(8), smooth(8, 0.03), failed(), stalled(8)] * 250  # 1000 results
    for index in range(100):
        clock.now = 1_000.0 + index  # everything stays within max_age_s: only the count bound acts
        store.add("t", "m", run, EvaluationSpec(POLICY))
        assert len(store.series()[0].records) == min(1_000 * (index + 1), limits.max_records)
    [view] = store.series()
    assert sum(view.requests.values()) == 100_000  # the counters still count everything
    assert view.records.at[0] == 1_097.0  # the newest rows are the ones kept
    assert len(store.recent("t", "m")) <= limits.recent_results + limits.recent_failures
    assert all(column.nbytes <= 8 * limits.max_records for column in view.records.columns.values())
    window = store.window("t", "m", 3_600.0)
    assert window is not None and sum(window.requests.values()) == limits.max_records


def test_recent_results_keep_failures_longer() -> None:
    store = ResultStore(StoreLimits(recent_results=3, recent_failures=5), clock=FakeClock())
    store.add(
        "t",
        "m",
        [failed(Outcome.CONNECT_ERROR), failed(Outcome.TTFT_TIMEOUT)],
        EvaluationSpec(POLICY),
        now=1_000.0,
    )
    store.add("t", "m", [smooth() for _ in range(10)], EvaluationSpec(POLICY), now=1_001.0)
    recent = store.recent("t", "m")
    assert [r.outcome for r in recent[:3]] == [Outcome.OK] * 3
    assert {r.outcome for r in recent[3:]} == {Outcome.CONNECT_ERROR, Outcome.TTFT_TIMEOUT}
    assert recent[-1].error == "boom"
    assert store.recent("t", "other") == []


def test_window_figures_equal_stats_on_the_window_requests() -> None:
    clock = FakeClock()
    store = ResultStore(clock=clock)
    old, new = mixed_run(), [smooth(50, 0.025), stalled(50, 0.4), smooth(30, 0.01), failed()]
    store.add("t", "m", old, EvaluationSpec(POLICY), now=1_000.0)
    store.add("t", "m", new, EvaluationSpec(POLICY), now=1_200.0)
    clock.now = 1_250.0
    window = store.window("t", "m", 100.0)  # only the second run
    assert window is not None
    done = [r for r in new if r.ok]
    batch = IntervalBatch.from_sequences(intervals(r) for r in done)
    prefill = POLICY.prefill_deadlines(np.zeros(len(batch)))
    for tier, dd in POLICY.decode_tiers.items():
        accounting = evaluate(batch, prefill, dd)
        assert window.service_level[tier] == accounting.service_level
        ranked = sorted(accounting.fluidity)
        assert window.fluidity[tier][0.5] == ranked[len(ranked) - 2]  # reached by >= 2 of the 3 requests
        assert window.fluidity[tier][0.01] == ranked[0]
    assert window.fluid_token_rate == fluid_token_rate(batch, POLICY.target_fluidity, POLICY.percentile)
    assert window.requests[Outcome.HTTP_STATUS] == 1
    assert window.lateness == {0.5: 0.002, 0.9: 0.002, 0.99: 0.002}
    assert len(window.client_ttfts) == 3


def test_fluid_token_rate_leaves_out_one_token_requests() -> None:
    store = ResultStore(clock=FakeClock())
    results = mixed_run()
    store.add("t", "m", results, EvaluationSpec(POLICY), now=1_000.0)
    minima = store.series()[0].records.column(MIN_DECODE_DEADLINE)
    assert int(np.count_nonzero(~np.isnan(minima))) == 4  # the one-token request and the failures have none
    window = store.window("t", "m", 60.0, 1_000.0)
    done = [r for r in results if r.ok]
    assert window is not None
    assert window.fluid_token_rate == fluid_token_rate([intervals(r) for r in done if len(intervals(r)) >= 2])


def test_window_cache_refreshes_when_rows_change() -> None:
    clock = FakeClock()
    store = ResultStore(clock=clock)
    store.add("t", "m", [smooth()], EvaluationSpec(POLICY), now=1_000.0)
    first = store.window("t", "m", 300.0)
    assert store.window("t", "m", 300.0) is first
    store.add("t", "m", [failed()], EvaluationSpec(POLICY), now=1_001.0)
    second = store.window("t", "m", 300.0)
    assert second is not first and second is not None and second.requests[Outcome.HTTP_STATUS] == 1
    clock.now = 1_300.5  # the first row ages out of the 5 minute window
    third = store.window("t", "m", 300.0)
    assert third is not None and third.requests[Outcome.OK] == 0


def test_changed_policy_restarts_rows_but_not_counters() -> None:
    store = ResultStore(clock=FakeClock())
    store.add("t", "m", [smooth()], EvaluationSpec(POLICY), now=1_000.0)
    other = DeadlinePolicy(prefill_deadline=0.5, decode_tiers={"tight": 0.01})
    store.add("t", "m", [smooth()], EvaluationSpec(other), now=1_001.0)
    [view] = store.series()
    assert len(view.records) == 1 and view.records.tiers == ("tight",)
    assert view.requests[Outcome.OK] == 2
    assert set(view.fluidity) == {"strict", "medium", "relaxed", "tight"}


def test_clock_stepping_back_keeps_rows_in_order() -> None:
    store = ResultStore(clock=FakeClock())
    store.add("t", "m", [smooth()], EvaluationSpec(POLICY), now=1_000.0)
    store.add("t", "m", [smooth()], EvaluationSpec(POLICY), now=999.0)
    assert store.series(1_000.0)[0].records.at.tolist() == [1_000.0, 1_000.0]


def test_retain_drops_removed_series_and_engines() -> None:
    store = ResultStore(clock=FakeClock())
    store.add("a", "m", [smooth()], EvaluationSpec(POLICY), now=1_000.0)
    store.add("b", "m", [smooth()], EvaluationSpec(POLICY), now=1_000.0)
    store.retain([("a", "m")])
    assert [(v.target, v.module) for v in store.series()] == [("a", "m")]


def test_window_longer_than_retention_is_refused() -> None:
    store = ResultStore(StoreLimits(max_age_s=60.0), clock=FakeClock())
    with pytest.raises(ValueError, match="duration_s must be in"):
        store.window("t", "m", 120.0)


@pytest.mark.parametrize(
    ("bounds", "message"),
    [
        ((), "needs at least one bound"),
        ((0.1, math.inf), "must be finite"),
        ((0.2, 0.1), "strictly increasing"),
    ],
)
def test_bucket_overrides_are_validated(bounds: tuple[float, ...], message: str) -> None:
    with pytest.raises(ValueError, match=rf"buckets\.ttft: .*{message}"):
        HistogramBuckets(ttft=bounds)


def test_bucket_override_is_used() -> None:
    store = ResultStore(buckets=HistogramBuckets(ttft=(0.3,)), clock=FakeClock())
    store.add("t", "m", [smooth(ttft=0.2), smooth(ttft=0.4)], EvaluationSpec(POLICY), now=1_000.0)
    assert store.series()[0].histograms["ttft"].buckets == ((0.3, 1), (math.inf, 2))


@pytest.mark.parametrize("field", ["max_records", "recent_results", "recent_failures"])
def test_limits_are_validated(field: str) -> None:
    with pytest.raises(ValueError, match=field):
        StoreLimits(**{field: 0})  # type: ignore[arg-type]
