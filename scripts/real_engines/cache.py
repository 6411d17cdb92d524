"""The engines' cache: one folder per engine and version, outside the clone, built once.

``~/.cache/fluidity-exporter/engines/<engine>-<version>/`` (``$FLUIDITY_ENGINES_CACHE`` moves the root).
A folder counts as built only when its ``ready.json`` exists, written last; an interrupted build leaves
no marker and is redone from scratch. Set-up holds an exclusive lock on ``<folder>.lock``, so two
processes (a CI step and a pytest fixture, say) never build the same engine at once: the second waits and
then finds it built.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

READY = "ready.json"


def cache_root() -> Path:
    """Where every engine's folder lives."""
    override = os.environ.get("FLUIDITY_ENGINES_CACHE")
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "fluidity-exporter" / "engines"


def is_ready(folder: Path) -> bool:
    """Whether ``folder`` holds a finished build."""
    return (folder / READY).is_file()


def read_ready(folder: Path) -> dict[str, Any]:
    """What the build recorded about itself (paths, versions, how long it took)."""
    data: dict[str, Any] = json.loads((folder / READY).read_text(encoding="utf-8"))
    return data


def mark_ready(folder: Path, facts: Mapping[str, Any]) -> None:
    """Record a finished build; written through a temporary file so a crash never leaves half a marker."""
    tmp = folder / (READY + ".tmp")
    tmp.write_text(json.dumps(dict(facts), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(folder / READY)


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold the build lock of ``folder`` (blocks while another process builds it)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with open(folder.with_name(folder.name + ".lock"), "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def fresh(folder: Path) -> None:
    """An empty ``folder`` (whatever an interrupted build left there is removed)."""
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)


def ensure_built(folder: Path, build: Callable[[Path], Mapping[str, Any]]) -> Path:
    """``folder`` built: unless its marker exists, ``build`` fills it from empty (holding the lock) and
    returns the facts the marker records, with the set-up's duration added. Returns ``folder``."""
    with locked(folder):
        if not is_ready(folder):
            started = time.monotonic()
            fresh(folder)
            facts = build(folder)
            mark_ready(folder, {**facts, "setup_seconds": round(time.monotonic() - started)})
    return folder


class StepError(RuntimeError):
    """A set-up step failed; the message names the command and the log that holds its output."""


def step(what: str, command: Sequence[str | Path], log: Path, **kwargs: Any) -> float:
    """Run one set-up command with its output appended to ``log``; returns its duration in seconds.

    Progress goes to stderr, one line per step, so a CI log shows where the minutes went."""
    args = [str(part) for part in command]
    print(f"[engines] {what} ...", file=sys.stderr, flush=True)
    started = time.monotonic()
    with open(log, "a", encoding="utf-8") as out:
        out.write(f"\n$ {' '.join(args)}\n")
        out.flush()
        code = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, check=False, **kwargs).returncode
    took = time.monotonic() - started
    if code != 0:
        tail = "".join(log.read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)[-30:])
        raise StepError(f"{what} failed (exit {code}): {' '.join(args)}\nlast lines of {log}:\n{tail}")
    print(f"[engines] {what}: {took:.0f} s", file=sys.stderr, flush=True)
    return took
