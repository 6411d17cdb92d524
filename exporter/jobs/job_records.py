"""Job records and where they are kept: one JSON file per job, so the history survives a restart.

A record is mutated in place while its job runs (progress, steps, then the outcome) and written again
after each change; a write goes to a temporary file in the same folder that then replaces the record's
file, so a crash leaves either the old or the new record, never half of one. Progress alone is written
at most once a second: a runner may report it per request, and the final state is written anyway.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast, get_args

from exporter.jobs.record_results import check_result
from exporter.jobs.state_files import WriteHealth, move_aside
from exporter.settings.job_params import JOB_KINDS, JobKind
from exporter.settings.json_file import JsonFileError, read_json_file

LOG = logging.getLogger(__name__)

JobState = Literal["running", "succeeded", "failed", "cancelled", "interrupted"]
JOB_STATES: tuple[JobState, ...] = get_args(JobState)
Trigger = Literal["api", "schedule", "cli"]
TRIGGERS: tuple[Trigger, ...] = get_args(Trigger)
INTERRUPTED_BY_RESTART = "the exporter restarted while this job ran"
PROGRESS_WRITE_INTERVAL_S = 1.0
_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")  # ids name files: nothing that could leave the folder


def new_job_id() -> str:
    """A short random id; 48 bits keep collisions out of reach for a history of hundreds."""
    return uuid.uuid4().hex[:12]


@dataclass(frozen=True)
class Progress:
    """How far a running job is (``fraction`` 0..1) and what it does now."""

    fraction: float = 0.0
    message: str = ""


def ended_progress(progress: Progress, state: str, error: str | None) -> Progress:
    """A job's progress once it ended other than by succeeding: the fraction it reached, and a message
    that says how it ended and what it was doing (not the last running line, such as "trial 1/8: ...")."""
    during = f" (during {progress.message})" if progress.message else ""
    return Progress(progress.fraction, f"{state}: {error}{during}")


@dataclass
class JobRecord:
    """One job, running or finished: what was asked, what happened so far and how it ended."""

    id: str
    kind: JobKind
    target: str
    module: str | None
    trigger: Trigger
    params: dict[str, Any]  # as given, once validated
    created_at: float  # unix time: shown to people
    state: JobState = "running"
    finished_at: float | None = None
    progress: Progress = field(default_factory=Progress)
    steps: list[dict[str, Any]] = field(default_factory=list)  # trials of a search, lengths of a profile
    result: dict[str, Any] | None = None
    error: str | None = None

    @property
    def finished(self) -> bool:
        return self.state != "running"

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form, as served by the API and written to disk."""
        return {
            "id": self.id,
            "kind": self.kind,
            "target": self.target,
            "module": self.module,
            "trigger": self.trigger,
            "state": self.state,
            "created_at": self.created_at,
            "finished_at": self.finished_at,
            "progress": {"fraction": self.progress.fraction, "message": self.progress.message},
            "params": self.params,
            "steps": self.steps,
            "result": self.result,
            "error": self.error,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobRecord:
        """The record ``to_dict`` wrote; ``ValueError`` naming the field if ``data`` is not one."""
        try:
            progress = _typed(data, "progress", dict)
            record = cls(
                id=_id(data),
                kind=cast(JobKind, _choice(data, "kind", JOB_KINDS)),
                target=_typed(data, "target", str),
                module=_optional(data, "module", str),
                trigger=cast(Trigger, _choice(data, "trigger", TRIGGERS)),
                params=_typed(data, "params", dict),
                created_at=float(_typed(data, "created_at", (int, float))),
                state=cast(JobState, _choice(data, "state", JOB_STATES)),
                finished_at=_optional_float(data, "finished_at"),
                progress=Progress(
                    float(_typed(progress, "fraction", (int, float))), _typed(progress, "message", str)
                ),
                steps=_typed(data, "steps", list),
                result=_optional(data, "result", dict),
                error=_optional(data, "error", str),
            )
        except KeyError as exc:
            raise ValueError(f"missing field {exc.args[0]}") from None
        check_result(record.kind, record.state, record.result)
        return record


def _typed(data: Mapping[str, Any], key: str, kind: type[Any] | tuple[type[Any], ...]) -> Any:
    value = data[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{key}: unexpected value {value!r}")
    return value


def _optional(data: Mapping[str, Any], key: str, kind: type[Any]) -> Any:
    return None if data.get(key) is None else _typed(data, key, kind)


def _optional_float(data: Mapping[str, Any], key: str) -> float | None:
    return None if data.get(key) is None else float(_typed(data, key, (int, float)))


def _choice(data: Mapping[str, Any], key: str, valid: tuple[str, ...]) -> str:
    value = data[key]
    if value not in valid:
        raise ValueError(f"{key}: {value!r} is not one of {', '.join(valid)}")
    return cast(str, value)


def _id(data: Mapping[str, Any]) -> str:
    value = _typed(data, "id", str)
    if not _ID.fullmatch(value):
        raise ValueError(f"id: {value!r} is not a job id")
    return cast(str, value)


class JobStore:
    """Every job record, newest first; backed by ``folder`` (one ``<id>.json`` each) unless it is None.

    At most ``keep`` finished records are kept, the oldest deleted first; running ones are never deleted.
    """

    def __init__(
        self, folder: Path | None, keep: int = 200, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if keep < 1:
            raise ValueError(f"keep must be >= 1, got {keep}")
        self.folder = folder
        self.keep = keep
        self._clock = clock
        self._records: dict[str, JobRecord] = {}
        self._written_at: dict[str, float] = {}
        self.write_health = WriteHealth("the job record")
        if folder is not None:
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:  # a read-only state dir: the history lives in memory, the daemon runs
                self.write_health.failed(folder, exc)

    def load(self) -> list[JobRecord]:
        """Read every record in the folder (at start-up). A record still running was cut off by a
        restart: it becomes ``interrupted``. A file that is not a valid record is moved aside with a
        warning naming it; one that cannot be read is skipped with one."""
        if self.folder is None:
            return []
        for stale in self.folder.glob(".*.tmp"):  # left behind by a crash mid-write
            with contextlib.suppress(OSError):  # a read-only dir keeps it: the glob skips it anyway
                stale.unlink(missing_ok=True)
        for path in sorted(self.folder.glob("*.json")):
            record = _read(path)
            if record is not None:
                self._records[record.id] = record
                self._mark_interrupted(record)
        self._prune()
        return self.records()

    def _mark_interrupted(self, record: JobRecord) -> None:
        if record.state == "running":
            record.state, record.error = "interrupted", INTERRUPTED_BY_RESTART
            record.progress = ended_progress(record.progress, record.state, record.error)
            record.finished_at = time.time()
            self.save(record)

    def records(self) -> list[JobRecord]:
        """Every record, newest first (the later added first when two were created at the same time)."""
        records = list(self._records.values())[::-1]  # the sort is stable: ties stay newest first
        records.sort(key=lambda r: r.created_at, reverse=True)
        return records

    def get(self, job_id: str) -> JobRecord | None:
        return self._records.get(job_id)

    def add(self, record: JobRecord) -> None:
        """Keep a new record and write it."""
        self._records[record.id] = record
        self.save(record)

    def save(self, record: JobRecord) -> None:
        """Write ``record`` now (its state or steps changed); a finished one may push out the oldest."""
        self._write(record)
        if record.finished:
            self._written_at.pop(record.id, None)
            self._prune()

    def save_progress(self, record: JobRecord) -> None:
        """Write ``record`` after a progress change, unless it was written less than a second ago."""
        last = self._written_at.get(record.id)
        if last is None or self._clock() - last >= PROGRESS_WRITE_INTERVAL_S:
            self._write(record)

    def _write(self, record: JobRecord) -> None:
        if self.folder is None:
            return
        if not record.finished:
            self._written_at[record.id] = self._clock()
        data = json.dumps(record.to_dict(), indent=1).encode()
        try:
            _replace(self.folder, self._path(record.id), data)
        except OSError as exc:
            # A full or read-only disk must not fail the job: the record still lives in memory.
            self.write_health.failed(self._path(record.id), exc)
        else:
            self.write_health.succeeded()

    def _prune(self) -> None:
        finished = [r for r in self.records() if r.finished]
        for record in finished[self.keep :]:
            del self._records[record.id]
            if self.folder is not None:
                with contextlib.suppress(OSError):  # a read-only dir: the next load prunes it again
                    self._path(record.id).unlink(missing_ok=True)

    def _path(self, job_id: str) -> Path:
        assert self.folder is not None
        return self.folder / f"{job_id}.json"


def _replace(folder: Path, path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: a temporary file in the same folder, then a rename."""
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _read(path: Path) -> JobRecord | None:
    """The record in ``path``, or None: a file that is no valid record is moved aside (``move_aside``)."""
    try:
        data = read_json_file(path)
    except OSError as exc:
        LOG.warning("skipping the job file %s: %s", path, exc)
        return None
    except JsonFileError as exc:
        move_aside(path, "the job file", exc)
        return None
    try:
        if not isinstance(data, Mapping):
            raise ValueError(f"a job record is a JSON object, not {type(data).__name__}")
        record = JobRecord.from_dict(data)
    except (ValueError, TypeError) as exc:
        move_aside(path, "the job file", exc)
        return None
    if path.stem != record.id:
        move_aside(path, "the job file", f"it holds job {record.id}")
        return None
    return record
