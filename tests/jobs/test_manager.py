"""The job manager: outcomes of every way a runner ends, one job per target, cancellation, time limits."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from exporter.jobs.job_records import JobRecord, JobStore
from exporter.jobs.manager import (
    JobConflictError,
    JobContext,
    JobFailedError,
    JobManager,
    Runner,
    UnknownJobError,
)
from exporter.settings.job_params import CapacityParams, JobParams, ProfileParams

CAPACITY = CapacityParams(target="a", module="chat")
BODY = {"target": "a", "module": "chat"}


class Gate:
    """A runner that reports two steps, then waits for ``release`` and records how it ended."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.waiting = asyncio.Event()
        self.cancelled = False

    async def __call__(self, params: JobParams, context: JobContext) -> dict[str, Any]:
        for number in range(2):
            context.progress(number / 2, f"trial {number}")
            context.add_step({"trial": number, "passed": True})
        self.waiting.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return {"load_kind": "rate", "capacity": 4.0, "target": params.target}


class Hooks:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def start(self, record: JobRecord) -> None:
        self.events.append(("start", record.id, record.state))

    def finish(self, record: JobRecord) -> None:
        self.events.append(("finish", record.id, record.state))


@pytest.fixture
def gate() -> Gate:
    return Gate()


@pytest.fixture
def hooks() -> Hooks:
    return Hooks()


@pytest.fixture
async def manager(tmp_path: Path, gate: Gate, hooks: Hooks) -> AsyncIterator[JobManager]:
    runners: dict[str, Runner] = {"capacity": gate, "prefill-profile": gate}
    manager = JobManager(JobStore(tmp_path), runners, on_start=hooks.start, on_finish=hooks.finish)
    yield manager
    await manager.shutdown()


def only(runner: Runner, **options: Any) -> JobManager:
    return JobManager(JobStore(None), {"capacity": runner}, **options)


async def test_a_job_reports_progress_and_steps_then_succeeds(
    manager: JobManager, gate: Gate, hooks: Hooks, tmp_path: Path
) -> None:
    record = manager.submit("capacity", CAPACITY, BODY, "api")
    assert (record.state, record.module, record.trigger, record.params) == ("running", "chat", "api", BODY)
    await gate.waiting.wait()
    on_disk = json.loads((tmp_path / f"{record.id}.json").read_text())
    assert on_disk["state"] == "running" and len(on_disk["steps"]) == 2  # steps are written as they come
    assert manager.list()[0] is record and manager.running_for("a") is record
    gate.release.set()
    done = await manager.wait(record.id)
    assert (done.state, done.result, done.error) == (
        "succeeded",
        {"load_kind": "rate", "capacity": 4.0, "target": "a"},
        None,
    )
    assert done.progress.fraction == 0.5 and done.finished_at is not None
    assert hooks.events == [("start", record.id, "running"), ("finish", record.id, "succeeded")]
    assert manager.running_for("a") is None
    assert JobStore(tmp_path).load()[0] == done


async def test_a_second_job_on_the_same_target_is_refused_whatever_its_kind(
    manager: JobManager, gate: Gate
) -> None:
    first = manager.submit("capacity", CAPACITY, BODY, "api")
    with pytest.raises(JobConflictError, match=f"capacity job {first.id} is already running") as caught:
        manager.submit("prefill-profile", ProfileParams(target="a"), {"target": "a"}, "schedule")
    assert caught.value.running is first
    other = manager.submit("prefill-profile", ProfileParams(target="b"), {"target": "b"}, "cli")
    gate.release.set()
    await manager.wait(first.id)
    await manager.wait(other.id)
    again = manager.submit("capacity", CAPACITY, BODY, "api")  # the target is free again
    assert (await manager.wait(again.id)).state == "succeeded"


async def test_cancel_stops_the_runner_and_returns_once_it_has_ended(
    manager: JobManager, gate: Gate, hooks: Hooks
) -> None:
    record = manager.submit("capacity", CAPACITY, BODY, "api")
    await gate.waiting.wait()
    started = time.perf_counter()
    cancelled = await manager.cancel(record.id)
    assert time.perf_counter() - started < 1.0
    assert gate.cancelled and cancelled.state == "cancelled" and cancelled.error == "cancelled on request"
    # how far it got stays, and the message says it ended (not left on "trial 1")
    assert cancelled.progress.fraction == 0.5
    assert cancelled.progress.message == "cancelled: cancelled on request (during trial 1)"
    assert hooks.events[-1] == ("finish", record.id, "cancelled")
    assert await manager.cancel(record.id) is cancelled  # a finished job: nothing to do
    with pytest.raises(UnknownJobError, match='unknown job "nope"'):
        await manager.cancel("nope")


async def test_a_job_cancelled_before_it_started_ends_without_hooks(
    manager: JobManager, hooks: Hooks
) -> None:
    record = manager.submit("capacity", CAPACITY, BODY, "api")
    assert (await manager.cancel(record.id)).state == "cancelled"
    assert hooks.events == [] and manager.running_for("a") is None


async def test_shutdown_marks_running_jobs_interrupted(manager: JobManager, gate: Gate) -> None:
    record = manager.submit("capacity", CAPACITY, BODY, "api")
    await gate.waiting.wait()
    await manager.shutdown()
    assert gate.cancelled and record.state == "interrupted" and "stopped" in (record.error or "")
    with pytest.raises(RuntimeError, match="shut down"):
        manager.submit("capacity", CAPACITY, BODY, "api")


async def test_a_job_over_its_time_limit_fails_naming_the_limit(gate: Gate) -> None:
    manager = only(gate, max_duration_s=lambda: 0.05)
    record = await manager.wait(manager.submit("capacity", CAPACITY, BODY, "api").id)
    assert gate.cancelled and record.state == "failed"
    assert record.error == "the job ran longer than jobs.limits.max_duration (0.05 s)"


async def test_a_reason_for_the_user_fails_the_job_with_that_message() -> None:
    async def refuse(params: JobParams, context: JobContext) -> dict[str, Any]:
        raise JobFailedError("the SLO is not met even at 1 req/s")

    manager = only(refuse)
    record = await manager.wait(manager.submit("capacity", CAPACITY, BODY, "api").id)
    assert (record.state, record.error) == ("failed", "the SLO is not met even at 1 req/s")
    assert record.progress.message == "failed: the SLO is not met even at 1 req/s"  # no progress before


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (ZeroDivisionError("division by zero"), "internal error: ZeroDivisionError: division by zero"),
        (TimeoutError("read timed out"), "internal error: TimeoutError: read timed out"),  # not our limit
    ],
)
async def test_a_bug_fails_the_job_and_is_logged_with_its_traceback(
    error: Exception, message: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def broken(params: JobParams, context: JobContext) -> dict[str, Any]:
        raise error

    manager = only(broken)
    with caplog.at_level(logging.ERROR):
        record = await manager.wait(manager.submit("capacity", CAPACITY, BODY, "api").id)
    assert (record.state, record.error) == ("failed", message)
    assert "Traceback" in caplog.text and record.id in caplog.text


async def test_a_result_that_is_not_json_is_a_bug() -> None:
    async def odd(params: JobParams, context: JobContext) -> dict[str, Any]:
        return {"when": object()}

    manager = only(odd)
    record = await manager.wait(manager.submit("capacity", CAPACITY, BODY, "api").id)
    assert record.state == "failed" and (record.error or "").startswith("internal error: TypeError")


async def test_on_finish_runs_even_when_the_job_fails(hooks: Hooks) -> None:
    async def refuse(params: JobParams, context: JobContext) -> dict[str, Any]:
        raise JobFailedError("no")

    manager = only(refuse, on_start=hooks.start, on_finish=hooks.finish)
    record = await manager.wait(manager.submit("capacity", CAPACITY, BODY, "api").id)
    assert hooks.events == [("start", record.id, "running"), ("finish", record.id, "failed")]


async def test_an_unknown_kind_is_refused_naming_the_valid_ones(gate: Gate) -> None:
    with pytest.raises(ValueError, match='unknown job kind "prefill-profile"; valid: capacity'):
        only(gate).submit("prefill-profile", ProfileParams(target="a"), {}, "api")


async def test_list_is_newest_first_with_running_jobs(manager: JobManager, gate: Gate) -> None:
    gate.release.set()
    first = await manager.wait(manager.submit("capacity", CAPACITY, BODY, "api").id)
    gate.release.clear()
    second = manager.submit("capacity", CAPACITY, BODY, "api")
    assert manager.list() == [second, first]
    assert manager.get(first.id) is first and manager.get("nope") is None
