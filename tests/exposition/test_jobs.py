"""Tests of JobsCollector through a CollectorRegistry of its own: job results as gauges, job counts."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.exposition import names
from exporter.exposition.job_gauges import (
    REFERENCE_PROMPT_TOKENS,
    CapacitySnapshot,
    CostPoint,
    JobCounts,
    JobsCollector,
    JobsSnapshot,
    ProfileSnapshot,
    TrialPoint,
)
from exporter.stats.prefill import PrefillModel

MODEL = PrefillModel(
    coefficients=(0.02, 1e-4, 1e-9), prompt_range=(128.0, 16384.0), sample_count=8, rmse=0.003
)
RATE = CapacitySnapshot(
    target="llm",
    module="chat",
    load_kind="rate",
    capacity=6.5,
    fluid_token_rate=42.0,
    goodput_ratio=0.97,
    goodput_rate=6.3,
    finished_at=1_700_000_000.0,
    trials=(TrialPoint(0, 1.0, True, 3.2), TrialPoint(1, 8.0, False, 0.7), TrialPoint(2, 6.5, True, None)),
    state="found",
    lower_bound=6.5,
    upper_bound=6.8,
    predicted={"estimate": 6.7, "low": 6.1, "high": 7.2},
    prediction_error=6.7 / 6.5 - 1.0,
    costs={
        "capacity": CostPoint(1200.0, 600.0, 2.0 / 3600.0 / 600.0),
        "highest_load": CostPoint(900.0, 450.0, 2.0 / 3600.0 / 450.0),
    },
    stopped_by="converged",
)
# Stopped by the load ceiling while still passing: 20 req/s is what it is at least, not a measurement.
CEILING = CapacitySnapshot(
    target="llm",
    module="long",
    load_kind="rate",
    capacity=None,
    fluid_token_rate=42.0,
    goodput_ratio=1.0,
    goodput_rate=20.0,
    finished_at=1_700_000_200.0,
    trials=(TrialPoint(0, 5.0, True, 3.0), TrialPoint(1, 20.0, True, 1.4)),
    state="lower_bound",
    lower_bound=20.0,
)
NOT_FOUND = CapacitySnapshot(
    target="llm",
    module="code",
    load_kind="concurrency",
    capacity=None,
    fluid_token_rate=None,
    goodput_ratio=None,
    goodput_rate=None,
    finished_at=1_700_000_100.0,
    trials=(TrialPoint(0, 1.0, False, 0.4),),
    stopped_by="floor",
)
COUNTS = JobCounts(
    finished={
        ("llm", "capacity", "succeeded"): 2,
        ("llm", "capacity", "failed"): 0,
        ("llm", "prefill-profile", "succeeded"): 1,
    },
    running={("llm", "prefill-profile"): 1},
)
SNAPSHOT = JobsSnapshot(
    capacity=(RATE, NOT_FOUND), profiles=(ProfileSnapshot("llm", MODEL, 1_699_999_000.0),), counts=COUNTS
)
CHAT = {"target": "llm", "module": "chat"}
CODE = {"target": "llm", "module": "code"}


def registry_of(snapshot: JobsSnapshot) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(JobsCollector(lambda: snapshot))
    return registry


def test_a_rate_search_shows_its_capacity_and_figures() -> None:
    get = registry_of(SNAPSHOT).get_sample_value
    assert get("fluidity_capacity_requests_per_second", CHAT) == 6.5
    assert get("fluidity_capacity_concurrency", CHAT) is None
    assert get("fluidity_capacity_found", CHAT) == 1.0
    assert get("fluidity_capacity_fluid_tokens_per_second", CHAT) == 42.0
    assert get("fluidity_capacity_goodput_ratio", CHAT) == 0.97
    assert get("fluidity_capacity_goodput_requests_per_second", CHAT) == 6.3
    assert get("fluidity_capacity_last_search_timestamp_seconds", CHAT) == 1_700_000_000.0


def test_the_last_search_trials_are_labelled_by_index() -> None:
    get = registry_of(SNAPSHOT).get_sample_value
    assert [get("fluidity_capacity_trial_load", {**CHAT, "trial": str(i)}) for i in range(3)] == [
        1.0,
        8.0,
        6.5,
    ]
    assert [get("fluidity_capacity_trial_passed", {**CHAT, "trial": str(i)}) for i in range(3)] == [
        1.0,
        0.0,
        1.0,
    ]
    assert get("fluidity_capacity_trial_slo_headroom", {**CHAT, "trial": "0"}) == 3.2
    assert get("fluidity_capacity_trial_slo_headroom", {**CHAT, "trial": "1"}) == 0.7
    assert get("fluidity_capacity_trial_slo_headroom", {**CHAT, "trial": "2"}) is None


def test_a_search_that_found_nothing_omits_the_capacity() -> None:
    get = registry_of(SNAPSHOT).get_sample_value
    assert get("fluidity_capacity_found", CODE) == 0.0
    assert get("fluidity_capacity_concurrency", CODE) is None
    assert get("fluidity_capacity_requests_per_second", CODE) is None
    assert get("fluidity_capacity_fluid_tokens_per_second", CODE) is None
    assert get("fluidity_capacity_goodput_ratio", CODE) is None
    assert get("fluidity_capacity_last_search_timestamp_seconds", CODE) == 1_700_000_100.0
    assert get("fluidity_capacity_trial_passed", {**CODE, "trial": "0"}) == 0.0


def test_what_ended_a_search_is_one_reason_of_a_set() -> None:
    get = registry_of(SNAPSHOT).get_sample_value
    assert get("fluidity_capacity_stopped_by", {**CODE, "reason": "floor"}) == 1.0
    assert get("fluidity_capacity_stopped_by", {**CODE, "reason": "max_trials"}) == 0.0
    assert get("fluidity_capacity_stopped_by", {**CHAT, "reason": "converged"}) == 1.0
    assert get("fluidity_capacity_stopped_by", {**CHAT, "reason": "floor"}) == 0.0
    unknown = registry_of(JobsSnapshot(capacity=(CEILING,))).get_sample_value  # stored before reasons
    assert (
        unknown("fluidity_capacity_stopped_by", {"target": "llm", "module": "long", "reason": "max_load"})
        is None
    )


def test_a_search_on_timings_the_client_distrusted_is_flagged_and_exports_no_capacity() -> None:
    """Found by its statistics, but an end's trial had requests the client flagged: no measurement for
    the capacity panels or the regression alert's maximum, the lower bound still shown."""
    flagged = dataclasses.replace(RATE, unreliable_timings=True)
    get = registry_of(JobsSnapshot(capacity=(flagged,))).get_sample_value
    assert get("fluidity_capacity_unreliable_timings", CHAT) == 1.0
    assert get("fluidity_capacity_requests_per_second", CHAT) is None
    assert get("fluidity_capacity_found", CHAT) == 0.0
    assert get("fluidity_capacity_state", {**CHAT, "state": "found"}) == 1.0  # what its trials showed
    assert get("fluidity_capacity_load_lower_bound", CHAT) == 6.5
    assert registry_of(SNAPSHOT).get_sample_value("fluidity_capacity_unreliable_timings", CHAT) == 0.0


def test_the_prediction_is_shown_beside_the_measured_bracket() -> None:
    get = registry_of(SNAPSHOT).get_sample_value
    chat = {"target": "llm", "module": "chat"}
    assert get("fluidity_capacity_predicted_load", {**chat, "end": "estimate"}) == 6.7
    assert get("fluidity_capacity_predicted_load", {**chat, "end": "low"}) == 6.1
    assert get("fluidity_capacity_predicted_load", {**chat, "end": "high"}) == 7.2
    assert get("fluidity_capacity_prediction_error_ratio", chat) == pytest.approx(0.2 / 6.5)
    assert get("fluidity_capacity_load_lower_bound", chat) == 6.5
    # A search without a prediction exports none: no gauge at a made-up load.
    assert (
        get("fluidity_capacity_predicted_load", {"target": "llm", "module": "long", "end": "estimate"})
        is None
    )


def test_a_concurrency_search_shows_its_capacity_as_concurrency() -> None:
    found = CapacitySnapshot("llm", "code", "concurrency", 12.0, None, None, None, 5.0)
    get = registry_of(JobsSnapshot(capacity=(found,))).get_sample_value
    assert get("fluidity_capacity_concurrency", CODE) == 12.0
    assert get("fluidity_capacity_requests_per_second", CODE) is None


def test_a_profile_shows_its_predictions_at_the_reference_lengths() -> None:
    get = registry_of(SNAPSHOT).get_sample_value
    for tokens in REFERENCE_PROMPT_TOKENS:
        value = get(
            "fluidity_prefill_profile_predicted_seconds", {"target": "llm", "prompt_tokens": str(tokens)}
        )
        assert value == pytest.approx(MODEL.predict(float(tokens)))
    assert get("fluidity_prefill_profile_timestamp_seconds", {"target": "llm"}) == 1_699_999_000.0


def test_job_counts() -> None:
    get = registry_of(SNAPSHOT).get_sample_value
    ended = {"target": "llm"}
    assert get("fluidity_jobs_finished_total", {**ended, "kind": "capacity", "state": "succeeded"}) == 2
    assert get("fluidity_jobs_finished_total", {**ended, "kind": "capacity", "state": "failed"}) == 0
    assert (
        get("fluidity_jobs_finished_total", {**ended, "kind": "prefill-profile", "state": "succeeded"}) == 1
    )
    assert get("fluidity_job_running", {"target": "llm", "kind": "prefill-profile"}) == 1


def test_each_scrape_reads_a_fresh_snapshot_and_registering_reads_none() -> None:
    snapshots = [JobsSnapshot(), SNAPSHOT]
    calls: list[int] = []

    def current() -> JobsSnapshot:
        calls.append(1)
        return snapshots[len(calls) - 1]

    registry = CollectorRegistry(auto_describe=True)
    registry.register(JobsCollector(current))
    assert calls == []
    assert registry.get_sample_value("fluidity_capacity_found", CHAT) is None
    assert registry.get_sample_value("fluidity_capacity_found", CHAT) == 1.0


def test_every_family_is_as_names_defines_it() -> None:
    found = CapacitySnapshot("llm", "long", "concurrency", 12.0, None, None, None, 5.0)
    full = JobsSnapshot(
        capacity=(*SNAPSHOT.capacity, found),
        profiles=SNAPSHOT.profiles,
        counts=COUNTS,
        gpus={"llm": 8.0},
        contexts={"llm": 2048},
        over_context=(("llm", "long"),),
        unwritten={"jobs": True, "profiles": False},
    )
    assert registry_of(full).get_sample_value("fluidity_exporter_state_unwritten", {"store": "jobs"}) == 1.0
    assert registry_of(full).get_sample_value("fluidity_capacity_found", {**CODE, "module": "long"}) == 1.0
    over = {"target": "llm", "module": "long"}
    assert registry_of(full).get_sample_value("fluidity_probe_over_context", over) == 1.0
    assert (
        registry_of(full).get_sample_value("fluidity_target_served_context_tokens", {"target": "llm"}) == 2048
    )
    specs = {spec.name.removesuffix("_total"): spec for spec in names.JOB_RESULTS}
    families = list(registry_of(full).collect())
    assert {family.name for family in families} == set(specs)
    for family in families:
        spec = specs[family.name]
        assert (family.type, family.documentation) == (spec.type, spec.help)
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                assert set(sample.labels) == set(spec.labels), family.name


@pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (Debian package prometheus)"
)
def test_promtool_check_metrics_reports_nothing() -> None:
    checked = subprocess.run(
        ["promtool", "check", "metrics"],
        input=generate_latest(registry_of(SNAPSHOT)).decode(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == "" and checked.stderr.strip() == ""


def test_a_lower_bound_is_no_measured_capacity() -> None:
    registry = registry_of(JobsSnapshot(capacity=(RATE, NOT_FOUND, CEILING)))
    long = {"target": "llm", "module": "long"}
    assert registry.get_sample_value("fluidity_capacity_requests_per_second", long) is None
    assert registry.get_sample_value("fluidity_capacity_found", long) == 0.0
    assert registry.get_sample_value("fluidity_capacity_load_lower_bound", long) == 20.0
    assert registry.get_sample_value("fluidity_capacity_load_upper_bound", long) is None
    states = {
        state: registry.get_sample_value("fluidity_capacity_state", {**long, "state": state})
        for state in ("found", "lower_bound", "not_met", "inconclusive")
    }
    assert states == {"found": 0.0, "lower_bound": 1.0, "not_met": 0.0, "inconclusive": 0.0}
    # Without a state: a capacity is a finding, none is "not met" (results stored before states).
    assert registry.get_sample_value("fluidity_capacity_state", {**CODE, "state": "not_met"}) == 1.0
    assert registry.get_sample_value("fluidity_capacity_state", {**CHAT, "state": "found"}) == 1.0
    assert registry.get_sample_value("fluidity_capacity_requests_per_second", CHAT) == 6.5


def test_cost_figures_at_capacity_and_at_the_highest_load() -> None:
    registry = registry_of(JobsSnapshot(capacity=(RATE,)))
    at = {**CHAT, "at": "capacity"}
    assert registry.get_sample_value("fluidity_capacity_fluid_goodput_tokens_per_second", at) == 1200.0
    assert registry.get_sample_value("fluidity_capacity_fluid_tokens_per_gpu_second", at) == 600.0
    cost = registry.get_sample_value("fluidity_capacity_fluid_token_cost", {**CHAT, "at": "highest_load"})
    assert cost == pytest.approx(2.0 / 3600.0 / 450.0)
