"""Checks of single config values: each returns the value it accepts or raises ``ValueError`` with a
message that says what is wrong and what is valid (the caller adds the path).
"""

from __future__ import annotations

import importlib
import math
import os
from typing import Any

from exporter.options.reader import (
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
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ValueError(f"{path} exists and is not a directory")
        if not os.access(path, os.W_OK | os.X_OK):
            raise ValueError(f"the directory {path} is not writable by this user")
        return path
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(
            f"{path} does not exist and cannot be created ({parent} is not a writable directory)"
        )
    return path


def bucket_bound(value: Any, high: float) -> float:
    finite = not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)
    if not finite or not 0 <= value <= high:
        limit = "in [0, 1]" if high == 1.0 else "finite and >= 0 (+Inf is always added)"
        raise ValueError(f"a bucket bound must be a number {limit}, got {show(value)}")
    return float(value)
