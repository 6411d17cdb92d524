"""Reading the files the daemon keeps under ``global.state_dir`` (job records, prefill profiles).

A state file is data from disk, which a crash, a full disk, a person's edit or another version of the
exporter may have left in any shape, so it is read bounded: at most ``MAX_STATE_FILE_BYTES``, nested at
most ``MAX_STATE_DEPTH`` deep (checked before ``json.loads`` could recurse: a deeply nested file raised
``RecursionError``, which named no file and stopped every start), and holding only finite numbers
(``json`` reads ``NaN``, ``Infinity`` and ``1e999`` as floats otherwise). A file that fails here or in
its record's own validation is moved aside (``move_aside``) with one warning that names it, so the
next start does not meet it again and nothing else is lost.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LOG = logging.getLogger(__name__)
# A capacity search's record with its trials is some 100 KiB; a profile with its samples less.
MAX_STATE_FILE_BYTES = 16 * 1024 * 1024
MAX_STATE_DEPTH = 32  # a record nests 5 deep; json.loads recurses once per level
BAD_SUFFIX = ".bad-"
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # unrolled: no alternation per character
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class StateFileError(ValueError):
    """A state file that cannot be used; the message says what is wrong (the caller names the file)."""


def read_state_json(path: Path) -> Any:
    """The JSON data in ``path``; ``StateFileError`` when it is too large, too deep, not JSON or holds a
    number that is not finite; ``OSError`` when it cannot be read."""
    with path.open("rb") as file:
        data = file.read(MAX_STATE_FILE_BYTES + 1)
    if len(data) > MAX_STATE_FILE_BYTES:
        raise StateFileError(f"larger than {MAX_STATE_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StateFileError(f"not UTF-8 text: {exc}") from None
    depth = nesting_depth(text)
    if depth > MAX_STATE_DEPTH:
        raise StateFileError(f"nested {depth} levels deep; at most {MAX_STATE_DEPTH} are read")
    try:
        return json.loads(text, parse_constant=_non_finite, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise StateFileError(f"not valid JSON: {exc}") from None


def nesting_depth(text: str) -> int:
    """How deep the arrays and objects of JSON ``text`` nest (brackets inside strings do not count)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    steps = (1 if bracket in "[{" else -1 for bracket in brackets)
    return max(itertools.accumulate(steps, initial=0))


def _non_finite(constant: str) -> float:
    raise StateFileError(f"{constant} is not a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise StateFileError(f"{text} is not a finite number")
    return value


def move_aside(
    path: Path, what: str, problem: object, *, clock: Callable[[], float] = time.time
) -> Path | None:
    """Rename the unusable ``path`` to ``<name>.bad-<UTC time>`` beside it, with one warning naming
    it, ``what`` it held and the ``problem``; the new path, or None when it could not be renamed (a
    read-only state dir: the warning says it stays, and it is skipped again at the next start)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(clock()))
    aside = path.with_name(f"{path.name}{BAD_SUFFIX}{stamp}")
    try:
        path.rename(aside)
    except OSError as exc:
        LOG.warning("skipping %s %s: %s (it stays: renaming it failed: %s)", what, path, problem, exc)
        return None
    LOG.warning("skipping %s %s: %s; moved aside to %s", what, path, problem, aside.name)
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
