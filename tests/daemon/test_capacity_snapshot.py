"""A stored capacity result as the daemon exports it: the state decides what is a measurement, and the
cost figures become gauges in base units (per token, not per million)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from exporter.daemon.job_snapshots import capacity_snapshot, jobs_snapshot
from exporter.exposition import names
from exporter.exposition.job_gauges import CAPACITY_STOPS, JobsCollector, JobsSnapshot
from exporter.jobs.capacity_result import STOP_KINDS
from exporter.jobs.job_records import JobRecord
from exporter.jobs.profiles import StoredProfile
from exporter.settings.model import Target
from exporter.stats.prefill import PrefillModel

MODEL = PrefillModel(coefficients=(0.02, 1e-4, 0.0), prompt_range=(128.0, 4096.0), sample_count=4, rmse=0.001)


def record(result: dict[str, Any]) -> JobRecord:
    return JobRecord(
        "j1", "capacity", "llm", "chat", "api", {}, 100.0, "succeeded", 200.0, result=result
    )  # fmt: skip


def test_a_lower_bound_is_exported_as_one_and_not_as_a_capacity() -> None:
    result = {"load_kind": "rate", "state": "lower_bound", "capacity": None, "lower_bound": 20.0}
    snapshot = capacity_snapshot(record(result))
    assert snapshot is not None
    assert (snapshot.state, snapshot.capacity, snapshot.lower_bound) == ("lower_bound", None, 20.0)


def test_the_prediction_is_read_beside_the_bracket() -> None:
    prediction = {"load": 8.3, "low": 7.9, "high": 8.9, "error": 8.3 / 8.0 - 1.0, "contradicted": []}
    result = {"load_kind": "rate", "state": "found", "lower_bound": 8.0, "upper_bound": 8.4}
    snapshot = capacity_snapshot(record({**result, "prediction": prediction}))
    assert snapshot is not None
    assert snapshot.predicted == {"estimate": 8.3, "low": 7.9, "high": 8.9}
    assert snapshot.prediction_error == pytest.approx(0.3 / 8.0)
    # Stored before predictions, or with none made: nothing exported.
    for none in (
        capacity_snapshot(record(result)),
        capacity_snapshot(record({**result, "prediction": None})),
    ):
        assert none is not None and none.predicted == {} and none.prediction_error is None


def test_a_result_on_distrusted_timings_is_flagged() -> None:
    """The job's result names the trials (a sentence); older results, without the key, were not flagged."""
    result = {"load_kind": "rate", "state": "found", "lower_bound": 8.0, "upper_bound": 8.4}
    shaky = capacity_snapshot(record({**result, "unreliable_timings": "the answer rests on ..."}))
    clean = capacity_snapshot(record({**result, "unreliable_timings": None}))
    old = capacity_snapshot(record(result))
    assert shaky is not None and shaky.unreliable_timings
    assert clean is not None and not clean.unreliable_timings
    assert old is not None and not old.unreliable_timings


def test_the_exported_stop_reasons_are_those_of_a_search_whose_job_succeeded() -> None:
    """exposition mirrors the search's reasons (it does not import jobs); the shard and no-data stops
    fail the job, and an interrupted search's job is cancelled or interrupted, so they never reach a
    gauge."""
    assert tuple(k for k in STOP_KINDS if k not in ("shards", "no_data", "interrupted")) == CAPACITY_STOPS


@pytest.mark.parametrize(
    ("stopped_by", "kind"),
    [
        ("converged", "converged"),
        ("floor", "floor"),
        ("max_trials", "max_trials"),
        ("time_budget", "time_budget"),
        (
            "jobs.limits.max_tokens: the next trial could spend 900 tokens and 300 of 1000 are spent",
            "max_tokens",
        ),
        ("shards: shard 1 died: exit code -9", "shards"),
        ("no_data: trial 2 at 4 req/s measured no request", "no_data"),
        ("budget", None),  # no reason of today's: stored by another version, not exported
        ("", None),
    ],
)
def test_what_ended_a_search_is_read_from_its_stopped_by(stopped_by: str, kind: str | None) -> None:
    snapshot = capacity_snapshot(record({"load_kind": "rate", "state": "not_met", "stopped_by": stopped_by}))
    assert snapshot is not None and snapshot.stopped_by == kind


def test_results_stored_before_states_are_read_by_what_they_said() -> None:
    """Old results named their highest pass "capacity", bracketed or not."""
    found = capacity_snapshot(record({"load_kind": "rate", "capacity": 8.0, "converged": True}))
    ceiling = capacity_snapshot(record({"load_kind": "rate", "capacity": 20.0, "converged": False}))
    nothing = capacity_snapshot(record({"load_kind": "rate", "capacity": None, "converged": False}))
    assert found is not None and (found.state, found.capacity) == ("found", 8.0)
    assert ceiling is not None and (ceiling.state, ceiling.capacity, ceiling.lower_bound) == (
        "lower_bound",
        None,
        20.0,
    )
    assert nothing is not None and nothing.state == "not_met"


def test_cost_figures_are_exported_per_token() -> None:
    costs = {
        "capacity": {
            "load": 8.0,
            "fluid_goodput_tokens_per_s": 900.0,
            "fluid_tokens_per_gpu_second": 450.0,
            "cost_per_million_fluid_tokens": 1.5,
        }
    }
    result = {"load_kind": "rate", "state": "found", "lower_bound": 8.0, "costs": costs}
    snapshot = capacity_snapshot(record(result))
    assert snapshot is not None and snapshot.capacity == 8.0
    point = snapshot.costs["capacity"]
    assert point.tokens_per_gpu_second == 450.0
    assert point.token_cost == pytest.approx(1.5e-6)


def test_a_target_no_longer_configured_leaves_the_snapshot() -> None:
    """A reload that removed or renamed "llm" once left its capacity gauges on /metrics for good."""
    result = {"load_kind": "rate", "state": "found", "lower_bound": 8.0}
    profiles = {"llm": StoredProfile("llm", MODEL, 1.0)}
    kept = jobs_snapshot([record(result)], profiles, [Target(name="llm", url="http://127.0.0.1:9")], {})
    assert [c.target for c in kept.capacity] == ["llm"] and [p.target for p in kept.profiles] == ["llm"]
    gone = jobs_snapshot([record(result)], profiles, [Target(name="other", url="http://127.0.0.1:9")], {})
    assert gone.capacity == () and gone.profiles == ()


def test_an_inconclusive_trial_that_passed_on_its_point_verdict_reads_passed_as_its_help_says() -> None:
    trials = [
        {"index": 0, "load": 4.0, "passed": True, "verdict": "pass", "headroom": 2.0},
        {"index": 1, "load": 8.0, "passed": True, "verdict": "inconclusive", "headroom": 1.1},
        {"index": 2, "load": 9.0, "passed": False, "verdict": "inconclusive", "headroom": 0.9},
    ]
    result = {"load_kind": "rate", "state": "inconclusive", "lower_bound": 8.0, "trials": trials}
    snapshot = capacity_snapshot(record(result))
    assert snapshot is not None
    registry = CollectorRegistry()
    registry.register(JobsCollector(lambda: JobsSnapshot(capacity=(snapshot,))))
    passed = [
        registry.get_sample_value(
            names.CAPACITY_TRIAL_PASSED.name, {"target": "llm", "module": "chat", "trial": i}
        )
        for i in "012"
    ]
    assert passed == [1.0, 1.0, 0.0]  # the point verdicts, whatever the intervals said
    help_text = names.CAPACITY_TRIAL_PASSED.help
    assert "point verdict" in help_text and "inconclusive" in help_text and "trials[].verdict" in help_text
    assert "SLO held" not in help_text


def test_finished_jobs_are_counted_per_target_from_zero_and_kept_after_a_reload() -> None:
    # FluidityJobFailed could not say which target's job failed: the counter had no target label.
    targets = [Target(name="llm", url="http://127.0.0.1:9")]
    finished = {("llm", "capacity", "failed"): 1, ("gone", "capacity", "succeeded"): 2}
    counts = jobs_snapshot([], {}, targets, finished).counts.finished
    assert counts[("llm", "capacity", "failed")] == 1
    assert counts[("llm", "prefill-profile", "succeeded")] == 0  # listed from the start, for rate()
    assert counts[("gone", "capacity", "succeeded")] == 2  # a reload removed it: a counter never goes back
