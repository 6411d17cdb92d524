"""The report's figures are exporter.stats applied to the recorded stamps, and files hold them all."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from exporter.evaluation import DeadlinePolicy, EvaluationSpec, measure
from exporter.report.files import write_outputs
from exporter.report.plots import PLOT_FILES, figures, pyplot, write_plots
from exporter.report.summary import reliability, request_record, summarize
from exporter.report.table import render_summary
from exporter.stats.batch import IntervalBatch
from exporter.stats.fluidity import evaluate, fluid_token_rate
from exporter.stats.objectives import GoodputBounds, parse_objective
from exporter.stats.prefill import fit_prefill_model
from exporter.streams.result import Outcome, ProbeResult, TokenSource, intervals


def streamed(
    ttft: float, gaps: list[float], counts: list[int] | None = None, sent: float = 50.0
) -> ProbeResult:
    times = list(np.cumsum([sent + ttft, *gaps]))
    counts = counts or [1] * len(times)
    return ProbeResult(
        api="completions",
        scheduled_at=sent - 0.001,
        sent_at=sent,
        token_times=times,
        token_counts=counts,
        finished_at=times[-1] + 0.001,
        token_source=TokenSource.TOKEN_IDS,
        prompt_tokens_reported=512,
        max_tokens=sum(counts),
    )


RESULTS = [
    streamed(0.2, [0.02] * 30),
    streamed(0.3, [0.02] * 10 + [0.93] + [0.02] * 10),
    streamed(0.25, [0.045, 0.0, 0.04] * 5, counts=[1, 2, 1] * 5 + [1]),
    ProbeResult(
        api="completions", outcome=Outcome.HTTP_STATUS, http_status=503, error="503 Service Unavailable"
    ),
    ProbeResult(
        api="completions",
        outcome=Outcome.STREAM_ABORTED,
        sent_at=10.0,
        token_times=[10.1, 10.2],
        token_counts=[1, 1],
        finished_at=10.3,
    ),
]
SPEC = EvaluationSpec(
    deadlines=DeadlinePolicy(prefill_deadline=0.5),
    slos=(parse_objective("ttft:p99<=0.28"), parse_objective("fluidity:p99>=0.9")),
    goodput=GoodputBounds(ttft=0.28),
)


def test_fluidity_and_rates_equal_the_metric_core_on_the_same_intervals() -> None:
    measured = measure(RESULTS, SPEC)
    summary = summarize(RESULTS, measured, SPEC, duration_s=10.0)
    expected_intervals = [
        [0.2] + [0.02] * 30,
        [0.3] + [0.02] * 10 + [0.93] + [0.02] * 10,
        [0.25] + [0.045, 0.0, 0.0, 0.04] * 5,
    ]
    assert [len(measured.batch.request(i)) for i in range(3)] == [31, 22, 21]
    for i, expected in enumerate(expected_intervals):
        assert measured.batch.request(i) == pytest.approx(expected, abs=1e-9)
    # The report must be the metric core applied to the intervals the stamps give (what requests.jsonl holds).
    batch = IntervalBatch.from_sequences(intervals(r) for r in RESULTS[:3])
    medium = evaluate(batch, 0.5, 0.05)
    assert summary["fluidity"]["tiers"]["medium"]["service_level"] == medium.service_level
    assert (
        medium.service_level
        == evaluate(IntervalBatch.from_sequences(expected_intervals), 0.5, 0.05).service_level
    )
    assert summary["fluidity"]["tiers"]["medium"]["requests_with_stalls"] == 1
    assert summary["rates"]["fluid_token_rate"] == fluid_token_rate(batch)
    assert summary["rates"]["tpot_based_rate"] > summary["rates"]["fluid_token_rate"]


def test_outcomes_goodput_and_slos_count_every_request() -> None:
    summary = summarize(RESULTS, measure(RESULTS, SPEC), SPEC, duration_s=10.0)
    assert summary["requests"]["total"] == 5
    assert summary["requests"]["completed"] == 3
    assert summary["requests"]["by_outcome"] == {"ok": 3, "http_status": 1, "stream_aborted": 1}
    # Why, for each outcome that says (the aborted stream here carries no message).
    assert summary["requests"]["first_error"] == {"http_status": "503 Service Unavailable"}
    assert summary["requests"]["http_status"] == {"503": 1}
    assert (
        summary["goodput"]["good"] == 2 and summary["goodput"]["total"] == 5
    )  # ttft 0.3 fails, failures count
    slos = {s["slo"]: s for s in summary["slos"]}
    # The two failed requests count against every objective, at the worst value (an infinite TTFT).
    assert slos["ttft:p99<=0.28"]["met"] is False and slos["ttft:p99<=0.28"]["observed"] is None
    assert slos["fluidity:p99>=0.9"]["samples"] == 5 and slos["fluidity:p99>=0.9"]["failed_requests"] == 2
    json.dumps(summary, allow_nan=False)  # strict JSON: no NaN anywhere
    # Per second of the whole run (vLLM's definition), and the table says so.
    assert summary["goodput"]["rate_per_s"] == pytest.approx(2 / 10.0)
    assert "(40.0%, 0.20 req/s over the run's 10.0 s, first send to last end)" in render_summary(summary)


def test_failed_requests_count_against_an_objective_as_in_a_capacity_trial() -> None:
    # Two fluid requests of five: met at p50 on the completed ones alone, missed over all requests.
    results = [RESULTS[0], RESULTS[0], RESULTS[3], RESULTS[3], RESULTS[4]]
    spec = dataclasses.replace(SPEC, slos=(parse_objective("fluidity:p50>=0.9"),))
    summary = summarize(results, measure(results, spec), spec, duration_s=10.0)
    assert summary["slos"][0]["met"] is False and summary["slos"][0]["observed"] == 0.0
    assert (
        "MISSED fluidity:p50>=0.9        observed 0 over 5 requests (3 failed requests, each counted against it)"
        in render_summary(summary)
    )


def test_no_completed_request_gives_no_level_and_no_request_no_verdict() -> None:
    failed = [RESULTS[3]] * 3
    summary = summarize(failed, measure(failed, SPEC), SPEC, duration_s=10.0)
    assert {tier["service_level"] for tier in summary["fluidity"]["tiers"].values()} == {None}
    table = render_summary(summary)
    assert "strict           25       -       -       -        -        0" in table  # not a level of 1.000
    assert "MISSED fluidity:p99>=0.9        observed 0 over 3 requests (3 failed requests" in table
    empty = summarize([], measure([], SPEC), SPEC, duration_s=10.0)
    assert [slo["met"] for slo in empty["slos"]] == [None, None]
    assert "n/a    ttft:p99<=0.28           not judged: no request to judge it on" in render_summary(empty)


def test_a_health_check_that_could_not_be_judged_is_marked_as_the_verdict_counts_it() -> None:
    """It was marked "n/a" while the verdict line said it failed (one rule: RELIABILITY_RULE)."""
    summary = summarize(RESULTS, measure(RESULTS, SPEC), SPEC, duration_s=10.0)
    summary["health_checks"] = [
        {"name": "success", "passed": True, "message": "100% of requests succeeded"},
        {"name": "prompt_tokens", "passed": None, "message": "not judged: the server reported no usage"},
    ]
    summary["reliable"], summary["failed_checks"] = reliability(summary["health_checks"])
    table = render_summary(summary)
    assert "  ok   success: 100% of requests succeeded" in table
    assert "  FAIL prompt_tokens: not judged: the server reported no usage" in table
    assert "measurement: NOT reliable: prompt_tokens failed; the server reported other prompt" in table


def test_prefill_model_sets_per_request_deadlines() -> None:
    model = fit_prefill_model([128, 512, 2048], [0.05, 0.1, 0.4])
    spec = EvaluationSpec(deadlines=DeadlinePolicy(prefill_model=model, scheduling_slack=0.1))
    measured = measure(RESULTS, spec)
    assert measured.prefill_deadlines == pytest.approx([model.deadline(512.0, 0.1)] * 3)
    described = spec.deadlines.describe()["prefill"]
    assert described["kind"] == "model" and described["scheduling_slack"] == 0.1


def test_partial_streams_are_recorded_as_such() -> None:
    record = request_record(RESULTS[4], SPEC)
    assert record["outcome"] == "stream_aborted" and record["partial"] is True
    assert record["intervals"] == pytest.approx([0.1, 0.1])
    failed = request_record(RESULTS[3], SPEC)
    assert failed["partial"] is False and failed["intervals"] == [] and failed["http_status"] == 503


def test_a_record_carries_the_saturation_evidence() -> None:
    result = dataclasses.replace(
        RESULTS[0], unreliable=True, loop_lag_s=0.004, loop_lag_share=0.1, multi_event_reads=2, cpu_share=0.93
    )
    result = dataclasses.replace(result, merged_events=4, doubtful_gaps=6)
    record = request_record(result, SPEC)
    evidence = (
        "unreliable",
        "loop_lag_s",
        "loop_lag_share",
        "multi_event_reads",
        "merged_events",
        "doubtful_gaps",
    )
    assert [record[key] for key in evidence] == [True, 0.004, 0.1, 2, 4, 6]
    assert record["cpu_share"] == 0.93


def test_output_directory_holds_every_file(tmp_path: Path) -> None:
    measured = measure(RESULTS, SPEC)
    summary = summarize(RESULTS, measured, SPEC, duration_s=10.0)
    written = write_outputs(tmp_path, RESULTS, measured, summary, SPEC)
    names = {p.name for p in written}
    assert names == {"requests.jsonl", "summary.json", "requests.csv", "tbt.csv", "deadline_miss_rate.csv"}
    lines = (tmp_path / "requests.jsonl").read_text().splitlines()
    assert len(lines) == 5 and json.loads(lines[1])["intervals"][11] == pytest.approx(0.93)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    with (tmp_path / "tbt.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 30 + 21 + 20
    with (tmp_path / "deadline_miss_rate.csv").open() as f:
        curve = [float(row["miss_rate"]) for row in csv.DictReader(f)]
    assert curve == sorted(curve, reverse=True) and curve[-1] == 0.0


def test_every_file_keys_a_request_by_its_id_and_dates_it(tmp_path: Path) -> None:
    """The CSVs were one per metric, joined by position over the completed requests only, and nothing
    in ``requests.jsonl`` said which request or when: a failed request first shifted every row."""
    results = [RESULTS[3], RESULTS[1]]  # a 503 first: only request 1 completed
    measured = measure(results, SPEC)
    summary = summarize(results, measured, SPEC, duration_s=10.0)
    write_outputs(tmp_path, results, measured, summary, SPEC, wall_offset=1_700_000_000.0)
    records = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    assert [r["id"] for r in records] == [0, 1]
    assert records[0]["sent_at_utc"] is None  # refused before it was sent
    assert records[1]["sent_at_utc"] == "2023-11-14T22:14:10.000000Z"  # sent at 50.0 on the stamps' clock
    with (tmp_path / "requests.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(row["id"], row["outcome"]) for row in rows] == [("0", "http_status"), ("1", "ok")]
    assert rows[0]["ttft_s"] == "" and rows[0]["fluidity_medium"] == ""
    assert float(rows[1]["ttft_s"]) == pytest.approx(0.3) and float(
        rows[1]["longest_gap_s"]
    ) == pytest.approx(0.93)
    assert rows[1]["sent_at_utc"] == records[1]["sent_at_utc"] and rows[1]["prompt_tokens"] == "512"
    assert 0 < float(rows[1]["fluidity_strict"]) < 1
    with (tmp_path / "tbt.csv").open() as f:
        gaps = list(csv.DictReader(f))
    assert {row["id"] for row in gaps} == {"1"} and len(gaps) == 21


def test_plots_are_written(tmp_path: Path) -> None:
    paths = write_plots(tmp_path, measure(RESULTS, SPEC))
    assert len(paths) == 5
    for path in paths:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_table_names_every_section() -> None:
    summary = summarize(RESULTS, measure(RESULTS, SPEC), SPEC, duration_s=10.0)
    text = render_summary(summary)
    for needle in (
        "requests: 5 sent, 3 completed",
        "TTFT (s)",
        "medium",
        "fluid token rate",
        "goodput",
        "MISSED",
    ):
        assert needle in text
    assert "nan" not in text.lower()


def test_no_completed_request_still_gives_a_report() -> None:
    failed = [RESULTS[3]]
    summary = summarize(failed, measure(failed, SPEC), SPEC, duration_s=1.0)
    assert summary["requests"]["completed"] == 0
    assert summary["rates"]["fluid_token_rate"] is None
    assert math.isnan(float("nan"))  # the JSON form has no NaN, the table renders dashes
    assert "-" in render_summary(summary)


def test_one_rule_for_reliability_in_the_table_the_verdict_and_the_json() -> None:
    # 1 unreliable request of 200 is within the 1% the "unreliable" check allows: every check passes,
    # so the verdict is "reliable" (it said "NOT reliable" under a table of "ok" checks).
    from exporter.load.health import HealthThresholds, check_success, check_unreliable

    results = [streamed(0.2, [0.02] * 5) for _ in range(200)]
    results[7].unreliable = True
    limits = HealthThresholds()
    checks = [
        dataclasses.asdict(check_unreliable(results, limits)),
        dataclasses.asdict(check_success(results, limits)),
    ]
    summary = summarize(results, measure(results, SPEC), SPEC, duration_s=10.0, health_checks=checks)
    assert summary["reliable"] is True and summary["failed_checks"] == []
    assert "every health check" in summary["reliability_rule"]
    text = render_summary(summary)
    assert "  ok   unreliable: " in text and "FAIL" not in text
    assert text.endswith("measurement: reliable (every health check of the load passed)")
    results[8].unreliable = results[9].unreliable = True  # 3 of 200: above 1%
    checks[0] = dataclasses.asdict(check_unreliable(results, limits))
    summary = summarize(results, measure(results, SPEC), SPEC, duration_s=10.0, health_checks=checks)
    assert summary["reliable"] is False and summary["failed_checks"] == ["unreliable"]
    text = render_summary(summary)
    assert "  FAIL unreliable: " in text
    # One line that says what to do, not only which check failed.
    verdict = text.splitlines()[-1]
    assert verdict.startswith("measurement: NOT reliable: unreliable failed; the client was too busy")
    assert all(hint in verdict for hint in ("--rate or --concurrency", "--workers N", "a quieter machine"))
    # Where the SLOs and goodput are said, not only at the end.
    caveat = "(judged on a measurement that is NOT reliable: see the health of the load below)"
    assert f"SLOs {caveat}:" in text
    assert f"first send to last end) {caveat}" in text


def test_each_plot_says_what_it_shows_and_fluidity_stays_within_its_range() -> None:
    """The plots had no titles, the fluidity CDF was a line at 1.0 on an axis past 1, and the
    deadline-miss curve did not mark the tiers the report judges at."""
    plt = pyplot()
    tiers = dict(SPEC.deadlines.decode_tiers)
    drawn = figures(plt, measure(RESULTS, SPEC), tiers)
    try:
        assert tuple(drawn) == PLOT_FILES  # the names a forced run removes
        assert all(figure.axes[0].get_title() for figure in drawn.values())
        fluidity = drawn["cdf_fluidity.png"].axes[0]
        assert fluidity.get_xlim()[1] == 1.0 and fluidity.get_xlim()[0] >= 0.0
        labels = [text.get_text() for text in fluidity.get_legend().get_texts()]
        assert labels[0].startswith(f"{next(iter(tiers))} (") and labels[0].endswith("at 1.0)")
        miss = drawn["deadline_miss_rate.png"].axes[0]
        marks = [line.get_xdata()[0] * 1e-3 for line in miss.lines[1:]]
        assert marks == pytest.approx(list(tiers.values()))
        assert [text.get_text() for text in miss.texts] == [f"{t} {d * 1e3:g} ms" for t, d in tiers.items()]
    finally:
        for figure in drawn.values():
            plt.close(figure)


def test_a_workload_check_warns_and_a_check_that_does_not_apply_is_marked_so() -> None:
    """Neither decides the verdict: outputs shorter than asked were timed right, and a closed loop of
    sessions has no concurrency to judge (both made every such run "NOT reliable", exit 1)."""
    checks = [
        {
            "name": "concurrency",
            "passed": None,
            "applies": False,
            "message": "does not apply to a closed loop",
        },
        {"name": "output_tokens", "passed": False, "required": False, "message": "12.5% got all"},
        {"name": "success", "passed": True, "message": "100% of requests succeeded"},
    ]
    summary = summarize(RESULTS, measure(RESULTS, SPEC), SPEC, duration_s=10.0, health_checks=checks)
    assert summary["reliable"] is True and summary["failed_checks"] == []
    assert summary["workload_warnings"] == ["output_tokens"]
    table = render_summary(summary)
    assert "  n/a  concurrency: does not apply" in table and "  warn output_tokens: 12.5%" in table
    assert table.endswith(
        "measurement: reliable (every health check of the load passed; output_tokens warns: see above)"
    )
    checks[2] = {"name": "success", "passed": False, "message": "50% of requests completed"}
    summary = summarize(RESULTS, measure(RESULTS, SPEC), SPEC, duration_s=10.0, health_checks=checks)
    assert summary["failed_checks"] == ["success"]
    assert render_summary(summary).endswith(
        "success failed; the target failed requests: their first errors are listed under requests above"
    )
