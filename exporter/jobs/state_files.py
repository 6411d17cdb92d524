"""The files the daemon keeps under ``global.state_dir`` (job records, prefill profiles): a bad one moved
aside, and a store whose writes fail said once.

A state file is read bounded (``exporter.settings.json_file``). A file that fails there or in its record's
own validation is moved aside (``move_aside``) with one warning that names it, so the next start does not
meet it again and nothing else is lost."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

LOG = logging.getLogger(__name__)
BAD_SUFFIX = ".bad-"


def move_aside(
    path: Path, what: str, problem: object, *, clock: Callable[[], float] = time.time
) -> Path | None:
    """Rename the unusable ``path`` to ``<name>.bad-<UTC time>`` beside it, with one warning naming
    it, ``what`` it held and the ``problem``; the new path, or None when it could not be renamed (a
    read-only state dir: the warning says it stays, and it is skipped again at the next start)."""
    aside = _aside_name(path, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock())))
    try:
        path.rename(aside)
    except OSError as exc:
        LOG.warning("skipping %s %s: %s (it stays: renaming it failed: %s)", what, path, problem, exc)
        return None
    LOG.warning("skipping %s %s: %s; moved aside to %s", what, path, problem, aside.name)
    return aside


def _aside_name(path: Path, stamp: str) -> Path:
    """``<name>.bad-<stamp>``, or with ``-2``, ``-3``... when that is taken: a rename replaces an
    existing file, and one name can go bad twice in a second (only the daemon writes there)."""
    aside = path.with_name(f"{path.name}{BAD_SUFFIX}{stamp}")
    for n in range(2, 1000):
        if not aside.exists():
            break
        aside = path.with_name(f"{path.name}{BAD_SUFFIX}{stamp}-{n}")
    return aside


class WriteHealth:
    """Whether the latest write of one store under ``state_dir`` failed (a read-only or full disk): the
    store then keeps its records in memory only, a restart loses them, and the log says so once per
    change, not once per write (a running job writes its progress every second)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.failing = False

    def failed(self, path: Path, exc: OSError) -> None:
        if not self.failing:
            LOG.error(
                "cannot write %s %s: %s; kept in memory only (a restart loses it) until a write succeeds",
                self.what, path, exc.strerror or exc,
            )  # fmt: skip
        self.failing = True

    def succeeded(self) -> None:
        if self.failing:
            LOG.info("%s written again: the state dir takes writes", self.what)
        self.failing = False
