"""Job records on disk: round trips, restarts mark running jobs interrupted, bad files, the history cap."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from exporter.jobs.job_records import INTERRUPTED_BY_RESTART, JobRecord, JobStore, Progress


def record(job_id: str, created_at: float, state: str = "succeeded", target: str = "a") -> JobRecord:
    done = state != "running"
    return JobRecord(
        id=job_id,
        kind="capacity",
        target=target,
        module="chat",
        trigger="api",
        params={"target": target, "slo": {"objectives": ["ttft:p99<=2"]}},
        created_at=created_at,
        state=state,  # type: ignore[arg-type]
        finished_at=created_at + 5 if done else None,
        progress=Progress(1.0 if done else 0.5, "trial 3"),
        steps=[{"load": 4.0, "passed": True}],
        result={"load_kind": "rate", "capacity": 4.0} if done else None,
    )


def test_a_record_survives_its_json_form() -> None:
    original = record("abc123", 100.0)
    assert JobRecord.from_dict(json.loads(json.dumps(original.to_dict()))) == original


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"id": "../../etc"}, "is not a job id"),
        ({"state": "paused"}, "state: 'paused' is not one of running"),
        ({"kind": "benchmark"}, "kind: 'benchmark'"),
        ({"created_at": "yesterday"}, "created_at: unexpected value"),
        ({"progress": {"fraction": 0.5}}, "missing field message"),
    ],
)
def test_a_damaged_record_is_refused_naming_the_field(change: dict[str, object], message: str) -> None:
    data = record("abc123", 100.0).to_dict() | change
    with pytest.raises(ValueError, match=message):
        JobRecord.from_dict(data)


def test_records_survive_a_new_store_on_the_same_folder(tmp_path: Path) -> None:
    store = JobStore(tmp_path)
    first, second = record("first", 100.0), record("second", 200.0, state="failed")
    store.add(first)
    store.add(second)
    reloaded = JobStore(tmp_path).load()
    assert reloaded == [second, first]  # newest first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["first.json", "second.json"]  # no temporary files


def test_a_job_running_at_restart_becomes_interrupted_on_disk_too(tmp_path: Path) -> None:
    JobStore(tmp_path).add(record("cut", 100.0, state="running"))
    (loaded,) = JobStore(tmp_path).load()
    assert (loaded.state, loaded.error) == ("interrupted", INTERRUPTED_BY_RESTART)
    assert loaded.finished_at is not None and loaded.steps == [{"load": 4.0, "passed": True}]
    # how far it got stays, and the message says it ended (not left on "trial 3")
    assert loaded.progress == Progress(0.5, f"interrupted: {INTERRUPTED_BY_RESTART} (during trial 3)")
    assert JobStore(tmp_path).load()[0].state == "interrupted"


def test_unreadable_files_are_skipped_with_a_warning_naming_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    JobStore(tmp_path).add(record("good", 100.0))
    (tmp_path / "truncated.json").write_text('{"id": "trunc')
    (tmp_path / "other.json").write_text(json.dumps(record("elsewhere", 1.0).to_dict()))
    (tmp_path / ".good.x1.tmp").write_text("left by a crash")
    with caplog.at_level(logging.WARNING):
        loaded = JobStore(tmp_path).load()
    assert [r.id for r in loaded] == ["good"]
    assert "truncated.json" in caplog.text and "other.json" in caplog.text
    assert not (tmp_path / ".good.x1.tmp").exists()


def test_history_keeps_the_newest_finished_records_and_every_running_one(tmp_path: Path) -> None:
    store = JobStore(tmp_path, keep=2)
    store.add(record("running", 1.0, state="running"))
    for number in range(5):
        store.add(record(f"done{number}", 10.0 + number))
    assert [r.id for r in store.records()] == ["done4", "done3", "running"]
    assert sorted(p.stem for p in tmp_path.glob("*.json")) == ["done3", "done4", "running"]
    assert store.get("done0") is None


def test_history_is_capped_at_load_too(tmp_path: Path) -> None:
    writer = JobStore(tmp_path)
    for number in range(4):
        writer.add(record(f"done{number}", float(number)))
    assert [r.id for r in JobStore(tmp_path, keep=1).load()] == ["done3"]
    assert [p.stem for p in tmp_path.glob("*.json")] == ["done3"]


def test_without_a_folder_the_store_lives_in_memory() -> None:
    store = JobStore(None, keep=1)
    store.add(record("a1", 1.0))
    store.add(record("a2", 2.0))
    assert store.load() == [] and [r.id for r in store.records()] == ["a2"]


def test_progress_alone_is_written_at_most_once_a_second(tmp_path: Path) -> None:
    now = [0.0]
    store = JobStore(tmp_path, clock=lambda: now[0])
    running = record("live", 1.0, state="running")
    store.add(running)

    def on_disk() -> float:
        fraction: float = json.loads((tmp_path / "live.json").read_text())["progress"]["fraction"]
        return fraction

    running.progress = Progress(0.6, "trial 4")
    store.save_progress(running)
    assert on_disk() == 0.5  # written 0 s ago
    now[0] = 1.0
    store.save_progress(running)
    assert on_disk() == 0.6
    running.progress = Progress(0.7, "trial 5")
    store.save(running)  # a step or a state change is written at once
    assert on_disk() == 0.7


def test_a_write_error_is_logged_and_the_record_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "jobs"
    store = JobStore(folder)
    folder.rmdir()
    with caplog.at_level(logging.ERROR):
        store.add(record("a1", 1.0))
    assert "cannot write the job record" in caplog.text and store.get("a1") is not None


def test_writes_that_keep_failing_are_logged_once_and_their_end_too(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "jobs"
    store = JobStore(folder)
    folder.rmdir()
    running = record("r1", 1.0, state="running")
    with caplog.at_level(logging.INFO, logger="exporter.jobs.state_files"):
        store.add(running)
        for step in range(5):  # a running job writes after every step
            running.steps.append({"load": float(step), "passed": True})
            store.save(running)
        assert store.write_health.failing
        folder.mkdir()
        store.save(running)
    assert not store.write_health.failing and JobStore(folder).load()[0].steps == running.steps
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == [logging.ERROR, logging.INFO], lines
    assert str(folder / "r1.json") in lines[0][1] and "kept in memory only" in lines[0][1]


def test_a_record_whose_result_the_metrics_cannot_read_is_refused_naming_the_field() -> None:
    data = record("abc123", 100.0).to_dict()
    with pytest.raises(ValueError, match=r"result\.load_kind"):
        JobRecord.from_dict(data | {"result": {}})
    trials = {"load_kind": "rate", "trials": [{"index": 1, "load": "4", "passed": True}]}
    with pytest.raises(ValueError, match=r"result.trials\[0\].load: expected a number"):
        JobRecord.from_dict(data | {"result": trials})
