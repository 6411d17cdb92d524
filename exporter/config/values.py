"""Checks of single config values: each returns the value it accepts or raises ``ValueError`` with a
message that says what is wrong and what is valid (the caller adds the path).
"""

from __future__ import annotations

import importlib
import math
import os
import re
from typing import Any
from urllib.parse import urlsplit

from exporter.options.reader import (
    show,
    string_value,
)

_LISTEN = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^:\[\]]*):(?P<port>\d{1,5})")


def check_url(value: Any) -> str:
    """An ``http(s)://host[:port][/path]`` URL without credentials, query or fragment."""
    text = string_value(value)
    parts = urlsplit(text)
    if parts.username is not None or parts.password is not None:
        raise ValueError("must not hold credentials (user:password@); use api_key or headers")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an http(s) URL like http://host:8000, got {show(text)}")
    try:
        parts.port  # noqa: B018 (urlsplit checks the port only when asked)
    except ValueError:
        raise ValueError(f"bad port in {show(text)}") from None
    if parts.query or parts.fragment:
        raise ValueError(f"must not have a query or fragment, got {show(text)}")
    return text.rstrip("/")


def check_target_url(value: Any) -> str:
    """A target's base URL: the exporter adds ``/v1/...`` itself."""
    url = check_url(value)
    if url.endswith("/v1"):
        raise ValueError(f"leave out the trailing /v1 (requests add it), got {show(url)}")
    return url


def check_listen_address(value: Any) -> str:
    text = string_value(value)
    match = _LISTEN.fullmatch(text)
    if match is None or int(match["port"]) > 65535:
        raise ValueError(f"must be HOST:PORT (e.g. 0.0.0.0:9468, :9468 or [::]:9468), got {show(text)}")
    return text


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
