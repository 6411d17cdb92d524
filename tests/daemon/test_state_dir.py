"""The daemon and the files of its state_dir: a bad file is moved aside by name and nothing else is lost;
a state dir that takes no writes loses no result and says so in a gauge and one log line."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from exporter.app import Daemon
from exporter.jobs.job_records import JobRecord, JobStore, Progress
from exporter.jobs.prefill_profile import PrefillProfile
from exporter.jobs.profiles import ProfileStore
from exporter.settings import parse_config
from exporter.stats.prefill import PrefillModel
from tests.support.daemon import samples, value

CONFIG = """
global: {{state_dir: "{state_dir}"}}
targets:
  - {{name: a, url: "http://127.0.0.1:1"}}
modules:
  m: {{requests_per_run: 1, schedule: {{interval: 1h}}}}
"""
MODEL = PrefillModel(coefficients=(0.02, 1e-4, 1e-9), prompt_range=(128.0, 16384.0), sample_count=8, rmse=0.0)
RESULT = {"load_kind": "rate", "state": "found", "capacity": 4.0, "lower_bound": 4.0, "trials": []}


def daemon_for(state: Path) -> Daemon:
    return Daemon(parse_config(CONFIG.format(state_dir=state), environ={}))


def capacity_job(job_id: str, result: dict[str, Any] | None) -> JobRecord:
    return JobRecord(
        id=job_id, kind="capacity", target="a", module="m", trigger="api", params={}, created_at=100.0,
        state="succeeded", finished_at=105.0, progress=Progress(1.0, "done"), result=result,
    )  # fmt: skip


def warnings_naming(caplog: pytest.LogCaptureFixture, name: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and name in r.getMessage()]


def test_a_job_record_metrics_cannot_read_is_moved_aside_and_metrics_answer(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    jobs = tmp_path / "state" / "jobs"
    JobStore(jobs).add(capacity_job("good", RESULT))
    (jobs / "empty.json").write_text(json.dumps(capacity_job("empty", {}).to_dict()))
    with caplog.at_level(logging.WARNING):
        daemon = daemon_for(tmp_path / "state")
    series = samples(daemon.metrics_text().decode())  # raised KeyError 'load_kind' on every scrape
    assert value(series, "fluidity_capacity_requests_per_second", target="a", module="m") == 4.0
    assert [r.id for r in daemon.job_env.job_store.records()] == ["good"]
    (aside,) = jobs.glob("empty.json.bad-*")
    (warning,) = warnings_naming(caplog, "empty.json")
    assert "result.load_kind" in warning and aside.name in warning
    assert sorted(p.name for p in jobs.glob("*.json")) == ["good.json"]


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(
    ("folder", "text", "problem"),
    [
        (
            "jobs",
            json.dumps(capacity_job("x", RESULT).to_dict()).replace('"params": {}', f'"params": {DEEP}'),
            "nested 100",
        ),
        ("profiles", '{"version": 1, "target": "a", "samples": ' + DEEP + "}", "nested 100"),
        ("jobs", json.dumps(capacity_job("x", RESULT).to_dict()).replace("105.0", "NaN"), "NaN"),
        ("jobs", json.dumps(capacity_job("x", RESULT).to_dict()).replace("105.0", "1e999"), "1e999"),
        (
            "profiles",
            json.dumps(ProfileStore(None).save("a", MODEL, 1.0).to_dict()).replace("1e-09", "1e308"),
            "predicts inf s",
        ),
    ],
    ids=["deep job", "deep profile", "NaN", "1e999", "profile coefficient 1e308"],
)
def test_a_bad_state_file_is_moved_aside_by_name_and_the_daemon_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, folder: str, text: str, problem: str
) -> None:
    state = tmp_path / "state"
    JobStore(state / "jobs").add(capacity_job("good", RESULT))
    (state / folder).mkdir(parents=True, exist_ok=True)
    (state / folder / "x.json").write_text(text)
    with caplog.at_level(logging.WARNING):
        daemon = daemon_for(state)  # RecursionError (naming no file) for the deep ones: a crash loop
    (warning,) = warnings_naming(caplog, "x.json")
    assert problem in warning
    assert [p.name.split(".bad-")[0] for p in (state / folder).glob("x.json.bad-*")] == ["x.json"]
    assert [r.id for r in daemon.job_env.job_store.records()] == ["good"]  # nothing else is lost
    assert daemon.deadline_policy("a").prefill_model is None  # the 1e308 profile set no Dp of inf


def test_a_state_dir_that_takes_no_writes_loses_no_profile_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    daemon = daemon_for(state)
    series = samples(daemon.metrics_text().decode())
    assert value(series, "fluidity_exporter_state_unwritten", store="profiles") == 0
    (state / "profiles").write_text("")  # a file where the folder goes: every write fails (ENOTDIR/EEXIST)
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            daemon.job_env.store_profile("a", PrefillProfile([], MODEL))  # raised OSError: the job failed
    assert daemon.deadline_policy("a").prefill_model == MODEL  # applied all the same
    series = samples(daemon.metrics_text().decode())
    assert value(series, "fluidity_exporter_state_unwritten", store="profiles") == 1
    assert value(series, "fluidity_exporter_state_unwritten", store="jobs") == 0
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is None  # one line, no traceback
    assert "prefill profile" in errors[0].getMessage() and str(state / "profiles") in errors[0].getMessage()


def test_job_history_that_cannot_be_written_is_marked_in_the_gauge(tmp_path: Path) -> None:
    state = tmp_path / "state"
    daemon = daemon_for(state)
    (state / "jobs").rmdir()
    (state / "jobs").write_text("")
    daemon.job_env.job_store.add(capacity_job("kept", RESULT))
    series = samples(daemon.metrics_text().decode())
    assert value(series, "fluidity_exporter_state_unwritten", store="jobs") == 1
    assert value(series, "fluidity_capacity_requests_per_second", target="a", module="m") == 4.0
