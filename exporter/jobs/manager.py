"""Runs on-demand jobs as asyncio tasks: one job per target at a time, each bounded in time, cancellable.

Every kind of job has a runner, ``async (params, context) -> result``; the manager owns everything around
it: the record and its states, the conflict check, the time limit, cancellation, the hooks the daemon uses
to pause a target's scheduled probes while a job loads it, and the outcome of every way a runner can end.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from exporter.jobs.job_records import (
    JobRecord,
    JobState,
    JobStore,
    Progress,
    Trigger,
    ended_progress,
    new_job_id,
)
from exporter.settings.job_params import CapacityParams, JobKind, JobLimits, JobParams

LOG = logging.getLogger(__name__)
STOPPED_BY_SHUTDOWN = "the exporter stopped while this job ran"
CANCELLED = "cancelled on request"


class JobFailedError(Exception):
    """Raised by a runner for a reason the user should see: the job fails with this message."""


class JobConflictError(Exception):
    """A job already runs on the target: one job per target at a time."""

    def __init__(self, running: JobRecord) -> None:
        super().__init__(
            f'{running.kind} job {running.id} is already running on target "{running.target}"; '
            "one job per target at a time: wait for it or cancel it"
        )
        self.running = running


class UnknownJobError(LookupError):
    """No job has this id (or it was pushed out of the history)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f'unknown job "{job_id}"')
        self.job_id = job_id


class JobContext:
    """What a runner may tell about its job while it runs; every change is persisted."""

    def __init__(self, record: JobRecord, store: JobStore) -> None:
        self._record = record
        self._store = store

    @property
    def job_id(self) -> str:
        return self._record.id

    def progress(self, fraction: float, message: str) -> None:
        """``fraction`` of the work is done (clamped to 0..1); ``message`` says what happens now."""
        self._record.progress = Progress(min(max(float(fraction), 0.0), 1.0), message)
        self._store.save_progress(self._record)

    def keep_result(self, result: Mapping[str, Any]) -> None:
        """What the job measured before it was stopped (cancelled, interrupted, out of time): kept as its
        result when it ends that way (JSON-ready; a copy is kept)."""
        self._record.result = _json_copy(result)

    def add_step(self, step: Mapping[str, Any]) -> None:
        """Append a finished step (a trial, a prompt length). It must be JSON-ready; a copy is kept."""
        self._record.steps.append(_json_copy(step))
        self._store.save(self._record)


Runner = Callable[[JobParams, JobContext], Awaitable[dict[str, Any]]]
Hook = Callable[[JobRecord], None]


def _json_copy(value: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy that fails here, in the runner's call, if ``value`` cannot be written as JSON."""
    copy: dict[str, Any] = json.loads(json.dumps(value))
    return copy


class _JobRun:
    """One job's run: its record and task, and how each way its runner can end is written into the
    record (and saved)."""

    def __init__(self, record: JobRecord, store: JobStore, stopping: Callable[[], bool]) -> None:
        self.record = record
        self._store = store
        self._stopping = stopping  # whether the manager shuts down: a cancelled run is "interrupted"
        self.task: asyncio.Task[None] | None = None
        self.started = False  # on_start was called, so on_finish must be
        self.settled = False

    async def execute(self, runner: Runner, params: JobParams, limit_s: float, on_start: Hook | None) -> None:
        """Call ``on_start``, then ``runner`` within ``limit_s``, and end the record as the runner ended
        (a ``CancelledError`` propagates once the record says so)."""
        record = self.record
        timeout = asyncio.timeout(limit_s)
        try:
            self.started = True
            if on_start is not None:
                on_start(record)
            async with timeout:
                result = _json_copy(await runner(params, JobContext(record, self._store)))
        except asyncio.CancelledError:
            self.end(*self.cancelled_state(), record.result)  # ``keep_result``'s, if any
            raise
        except JobFailedError as exc:
            self.end("failed", str(exc))
        except TimeoutError as exc:
            if not timeout.expired():
                self._end_with_bug(exc)
            else:
                message = f"the job ran longer than jobs.limits.max_duration ({limit_s:g} s)"
                self.end("failed", message, record.result)
        except Exception as exc:
            self._end_with_bug(exc)
        else:
            self.end("succeeded", None, result)

    def cancelled_state(self) -> tuple[JobState, str]:
        """How a cancelled run ends: ``interrupted`` by a shutdown, as after a restart, else ``cancelled``."""
        return ("interrupted", STOPPED_BY_SHUTDOWN) if self._stopping() else ("cancelled", CANCELLED)

    def _end_with_bug(self, exc: Exception) -> None:
        record = self.record
        LOG.exception("job %s (%s) on %s failed with a bug", record.id, record.kind, record.target)
        self.end("failed", f"internal error: {type(exc).__name__}: {exc}")

    def end(self, state: JobState, error: str | None, result: dict[str, Any] | None = None) -> None:
        """Write the run's end into its record and save it."""
        record = self.record
        record.state, record.error, record.result = state, error, result
        record.finished_at = time.time()
        if state != "succeeded":
            record.progress = ended_progress(record.progress, state, error)
        self._store.save(record)
        LOG.info(
            "job %s (%s) on %s: %s%s",
            record.id,
            record.kind,
            record.target,
            state,
            f" ({error})" if error else "",
        )


class JobManager:
    """Starts, tracks and stops jobs. ``max_duration_s`` (or a function giving it, read as each job
    starts, so a reloaded config applies to the next job) bounds every job's wall time."""

    def __init__(
        self,
        store: JobStore,
        runners: Mapping[str, Runner],
        *,
        on_start: Hook | None = None,
        on_finish: Hook | None = None,
        max_duration_s: float | Callable[[], float] = JobLimits.max_duration_s,
    ) -> None:
        self.store = store
        self.runners = dict(runners)
        self._on_start = on_start
        self._on_finish = on_finish
        self._max_duration_s = max_duration_s
        self._runs: dict[str, _JobRun] = {}  # running jobs by id
        self._stopping = False

    # -- queries ------------------------------------------------------------------------------------

    def get(self, job_id: str) -> JobRecord | None:
        return self.store.get(job_id)

    def list(self) -> list[JobRecord]:
        """Every job kept, running or finished, newest first."""
        return self.store.records()

    def running_for(self, target: str) -> JobRecord | None:
        """The job running on ``target``, if any."""
        return next((run.record for run in self._runs.values() if run.record.target == target), None)

    # -- control ------------------------------------------------------------------------------------

    def submit(
        self, kind: JobKind, params: JobParams, params_dict: Mapping[str, Any], trigger: Trigger
    ) -> JobRecord:
        """Record a new job and start it on the running loop; ``JobConflictError`` if ``params.target``
        already runs a job of any kind."""
        if kind not in self.runners:
            raise ValueError(f'unknown job kind "{kind}"; valid: {", ".join(sorted(self.runners))}')
        if self._stopping:
            raise RuntimeError("the job manager is shut down")
        running = self.running_for(params.target)
        if running is not None:
            raise JobConflictError(running)
        module = params.module if isinstance(params, CapacityParams) else None
        record = JobRecord(new_job_id(), kind, params.target, module, trigger, dict(params_dict), time.time())
        self.store.add(record)
        run = self._runs[record.id] = _JobRun(record, self.store, lambda: self._stopping)
        run.task = asyncio.get_running_loop().create_task(
            self._run(run, self.runners[kind], params), name=f"job-{kind}-{record.id}"
        )
        # A task cancelled before its first step never enters its body: settle it here too.
        run.task.add_done_callback(lambda _: self._settle(run))
        LOG.info("job %s (%s) started on %s by %s", record.id, kind, record.target, trigger)
        return record

    async def cancel(self, job_id: str) -> JobRecord:
        """Cancel a running job and wait until it has ended (its load has stopped). A finished job is
        returned as it is. ``UnknownJobError`` if no job has this id."""
        run = self._runs.get(job_id)
        if run is None:
            record = self.store.get(job_id)
            if record is None:
                raise UnknownJobError(job_id)
            return record
        await self._stop(run)
        return run.record

    async def wait(self, job_id: str) -> JobRecord:
        """Wait for a job to end and return its record."""
        run = self._runs.get(job_id)
        if run is not None and run.task is not None:
            await asyncio.wait({run.task})
            self._settle(run)
        record = self.store.get(job_id)
        if record is None:
            raise UnknownJobError(job_id)
        return record

    async def shutdown(self) -> None:
        """Stop every running job; they end ``interrupted``, as they would after a restart."""
        self._stopping = True
        await asyncio.gather(*(self._stop(run) for run in list(self._runs.values())))

    async def _stop(self, run: _JobRun) -> None:
        assert run.task is not None
        run.task.cancel()
        # asyncio.wait, not ``await task``: the task's CancelledError must not look like our own.
        await asyncio.wait({run.task})
        self._settle(run)

    # -- one run ------------------------------------------------------------------------------------

    def _duration_limit(self) -> float:
        limit = self._max_duration_s
        return limit() if callable(limit) else limit

    async def _run(self, run: _JobRun, runner: Runner, params: JobParams) -> None:
        limit_s = self._duration_limit()
        try:
            await run.execute(runner, params, limit_s, self._on_start)
        finally:
            self._settle(run)

    def _settle(self, run: _JobRun) -> None:
        """Once per run, whichever way it ended: forget it as running and call ``on_finish``."""
        if run.settled:
            return
        run.settled = True
        if not run.record.finished:  # cancelled before it started
            run.end(*run.cancelled_state())
        self._runs.pop(run.record.id, None)
        if run.started and self._on_finish is not None:
            try:
                self._on_finish(run.record)
            except Exception:
                LOG.exception("on_finish of job %s failed", run.record.id)
