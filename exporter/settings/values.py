"""Checks of single config values: each returns the value it accepts or raises ``ValueError`` with a
message that says what is wrong and what is valid (the caller adds the path).
"""

from __future__ import annotations

import importlib
import math
import os
import tempfile
from typing import Any

from exporter.settings.reader import (
    show,
    string_value,
)


def check_cron(value: Any) -> str:
    """A five-field crontab line, as APScheduler's ``CronTrigger.from_crontab`` reads it."""
    text = string_value(value)
    cron = importlib.import_module("apscheduler.triggers.cron")
    try:
        cron.CronTrigger.from_crontab(text, timezone="UTC")
    except ValueError as exc:
        raise ValueError(f"bad cron expression {show(text)}: {exc}") from None
    return text


def reference(value: Any, kind: str, valid: list[str]) -> str:
    if not isinstance(value, str) or value not in valid:
        raise ValueError(f"unknown {kind} {show(value)}; valid: {', '.join(valid) or '(none defined)'}")
    return value


def check_state_dir(path: str) -> str:
    """A folder the daemon can write (profiles and job history go there), or one it can create: checked
    now, so that ``check-config`` refuses what would fail at the first write."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"{path} exists and is not a directory")
    existing = _nearest_existing(os.path.abspath(path))
    problem = _creation_problem(existing)
    if problem is None:
        return path
    if existing == os.path.abspath(path):
        raise ValueError(f"the daemon cannot write in the directory {path} ({problem})")
    raise ValueError(f"{path} does not exist and cannot be created ({problem})")


def _nearest_existing(path: str) -> str:
    """``path`` itself when it exists, else its closest ancestor that does."""
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def _creation_problem(folder: str) -> str | None:
    """Why a folder cannot be made in ``folder`` (None when one can), by making one and removing it.

    ``os.access`` is not enough: root passes it everywhere, yet cannot create in ``/proc`` or ``/sys``
    (ENOENT), and the file system's type is not portable to read. An empty folder under a hidden name,
    removed at once, is the one check that agrees with the daemon's own ``mkdir``."""
    if not os.path.isdir(folder):
        return f"{folder} is not a directory"
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".fluidity-check-", dir=folder))
    except OSError as exc:
        return f"making a folder in {folder} failed: {exc.strerror or exc}"
    return None


def bucket_bound(value: Any, high: float) -> float:
    finite = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    if not finite or not 0 <= value <= high:
        limit = "in [0, 1]" if high == 1.0 else "finite and >= 0 (+Inf is always added)"
        raise ValueError(f"a bucket bound must be a number {limit}, got {show(value)}")
    return float(value)
