"""Reading a JSON file the exporter did not write in this run, bounded: state files under
``global.state_dir`` (job records, prefill profiles) and the config's ``slos.*.prefill.model_file``.

Such a file may have been left in any shape by a crash, a full disk, a person's edit or another version
of the exporter, so it is read at most ``MAX_JSON_FILE_BYTES``, nested at most ``MAX_JSON_DEPTH`` deep
(checked before ``json.loads`` could recurse: a deeply nested file raised ``RecursionError``, which named
no file), and holding only finite numbers (``json`` reads ``NaN``, ``Infinity`` and ``1e999`` as floats
otherwise). The caller names the file in its message.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path
from typing import Any

# A capacity search's record with its trials is some 100 KiB; a profile or a prefill model less.
MAX_JSON_FILE_BYTES = 16 * 1024 * 1024
MAX_JSON_DEPTH = 32  # a job record nests 5 deep; json.loads recurses once per level
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # unrolled: no alternation per character
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


class JsonFileError(ValueError):
    """A JSON file that cannot be used; the message says what is wrong (the caller names the file)."""


def read_json_file(path: Path) -> Any:
    """The JSON data in ``path``; ``JsonFileError`` when it is too large, too deep, not JSON or holds a
    number that is not finite; ``OSError`` when it cannot be read."""
    with path.open("rb") as file:
        data = file.read(MAX_JSON_FILE_BYTES + 1)
    if len(data) > MAX_JSON_FILE_BYTES:
        raise JsonFileError(f"larger than {MAX_JSON_FILE_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonFileError(f"not UTF-8 text: {exc}") from None
    depth = nesting_depth(text)
    if depth > MAX_JSON_DEPTH:
        raise JsonFileError(f"nested {depth} levels deep; at most {MAX_JSON_DEPTH} are read")
    try:
        return json.loads(text, parse_constant=_non_finite, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise JsonFileError(f"not valid JSON: {exc}") from None


def nesting_depth(text: str) -> int:
    """How deep the arrays and objects of JSON ``text`` nest (brackets inside strings do not count)."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    steps = (1 if bracket in "[{" else -1 for bracket in brackets)
    return max(itertools.accumulate(steps, initial=0))


def _non_finite(constant: str) -> float:
    raise JsonFileError(f"{constant} is not a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonFileError(f"{text} is not a finite number")
    return value
