"""Readers of real trace files, for users who have them: each row's lengths, arrival and text.

Formats (``TRACE_FORMATS``):

* ``sharegpt``: ShareGPT JSON, a list of ``{"conversations": [{"from": "human", "value": ...},
  {"from": "gpt", "value": ...}, ...]}``. Each conversation gives one request: its first human turn
  is the prompt, the reply that follows sets the output length. Conversations without such a pair are
  skipped (as vLLM's benchmark does). Its later (human, reply) pairs are kept as the conversation's
  follow-ups: with ``sessions`` (``bench --turns trace``) each conversation is replayed as a
  multi-turn session of its own turns, the human messages verbatim, each reply's length as the turn's
  ``max_tokens`` (the answers themselves are the server's, streamed back into the next turn). Token counts come from ``count_tokens`` when given (e.g. the
  simulator's tokenizer), else a tokenizer-free estimate of one token per 4 characters (the usual
  rule of thumb for English BPE text; expect +-25% on other text).
* ``azure``: the Azure LLM inference trace CSV (``TIMESTAMP,ContextTokens,GeneratedTokens``);
  TIMESTAMP is a date-time (``2023-11-16 18:15:46.6805900``) or a number of seconds.
* ``mooncake``: Mooncake JSONL, one ``{"timestamp": ms, "input_length", "output_length",
  "hash_ids"}`` per line (timestamps in milliseconds; ``hash_ids`` is kept but prefix sharing is not
  reproduced: every generated prompt is unique).
* ``jsonl``: generic JSONL, one ``{"prompt": text | "prompt_tokens": n, "output_tokens": n,
  "timestamp": seconds}`` per line (``timestamp`` optional, ``prompt_tokens`` with ``prompt`` overrides
  the estimate).

A bad file raises ``ValueError`` naming the file, the line (``entry`` N for ShareGPT's JSON list) and
the field. Timestamps are returned in seconds.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Final

CountTokens = Callable[[str], int]
CHARS_PER_TOKEN = 4.0


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace: lengths in tokens, arrival in seconds, and the prompt text if known."""

    prompt_tokens: int
    output_tokens: int
    timestamp: float | None = None
    prompt: str | None = None
    hash_ids: tuple[int, ...] = ()
    followups: tuple[tuple[str, int, int], ...] = ()  # later turns: (user text, its tokens, reply tokens)


def estimate_tokens(text: str) -> int:
    """Tokenizer-free estimate: one token per ``CHARS_PER_TOKEN`` characters, at least one."""
    return max(1, round(len(text) / CHARS_PER_TOKEN))


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"cannot read trace file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def _count(where: str, name: str, raw: Any) -> int:
    """A token count: a non-negative integer (integral floats such as 12.0 accepted)."""
    bad = f'{where}: field "{name}" must be an integer >= 0, got {raw!r}'
    value = _finite(raw, bad)
    if value < 0 or value != int(value):
        raise ValueError(bad)
    return int(value)


def _seconds(where: str, name: str, raw: Any, scale: float = 1.0) -> float:
    return _finite(raw, f'{where}: field "{name}" must be a finite number, got {raw!r}') * scale


def _finite(raw: Any, bad: str) -> float:
    """``raw`` as a finite float (a bool is not a number here); ``bad`` is the error otherwise."""
    if isinstance(raw, bool):
        raise ValueError(bad)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ValueError(bad) from None
    if not math.isfinite(value):
        raise ValueError(bad)
    return value


def _field(where: str, record: Mapping[str, Any], name: str) -> Any:
    if name not in record:
        raise ValueError(f'{where}: missing field "{name}"')
    return record[name]


# --- JSONL ---------------------------------------------------------------------------------------


def _jsonl_records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    for line_no, line in enumerate(_read_text(path).splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{line_no}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{where}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
        yield where, record


def load_mooncake(path: str | Path) -> list[TraceRequest]:
    """Mooncake JSONL (timestamps in milliseconds)."""
    out = []
    for where, rec in _jsonl_records(Path(path)):
        hash_ids = rec.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(isinstance(h, int) for h in hash_ids):
            raise ValueError(f'{where}: field "hash_ids" must be a list of integers, got {hash_ids!r}')
        out.append(
            TraceRequest(
                prompt_tokens=_count(where, "input_length", _field(where, rec, "input_length")),
                output_tokens=_count(where, "output_length", _field(where, rec, "output_length")),
                timestamp=_seconds(where, "timestamp", _field(where, rec, "timestamp"), 1e-3),
                hash_ids=tuple(hash_ids),
            )
        )
    return _non_empty(path, out)


def load_jsonl(path: str | Path, *, count_tokens: CountTokens | None = None) -> list[TraceRequest]:
    """Generic JSONL: ``prompt`` text and/or ``prompt_tokens``, ``output_tokens``, optional ``timestamp``."""
    out = []
    for where, rec in _jsonl_records(Path(path)):
        text = rec.get("prompt")
        if text is not None and not isinstance(text, str):
            raise ValueError(f'{where}: field "prompt" must be a string, got {type(text).__name__}')
        if text is None and "prompt_tokens" not in rec:
            raise ValueError(f'{where}: missing field "prompt" or "prompt_tokens"')
        if "prompt_tokens" in rec:
            tokens = _count(where, "prompt_tokens", rec["prompt_tokens"])
        else:
            tokens = (count_tokens or estimate_tokens)(text or "")
        stamp = rec.get("timestamp")
        out.append(
            TraceRequest(
                prompt_tokens=tokens,
                output_tokens=_count(where, "output_tokens", _field(where, rec, "output_tokens")),
                timestamp=None if stamp is None else _seconds(where, "timestamp", stamp),
                prompt=text,
            )
        )
    return _non_empty(path, out)


# --- Azure CSV -----------------------------------------------------------------------------------

_AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _azure_time(where: str, raw: str) -> float:
    """Seconds: a plain number, else an ISO date-time as POSIX seconds (7-digit fractions accepted)."""
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(raw.strip()).timestamp()
    except ValueError:
        raise ValueError(
            f'{where}: field "TIMESTAMP" must be a date-time (2023-11-16 18:15:46.68) or seconds, got {raw!r}'
        ) from None


def _azure_header(path: Path, header: Sequence[str] | None) -> dict[str, str]:
    found = {name.strip().lower(): name for name in header or ()}
    missing = [c for c in _AZURE_COLUMNS if c.lower() not in found]
    if missing:
        shown = ", ".join(n.strip() for n in header or ()) or "nothing"
        raise ValueError(f'{path}:1: missing column "{missing[0]}"; found: {shown}')
    return {c: found[c.lower()] for c in _AZURE_COLUMNS}


def load_azure(path: str | Path) -> list[TraceRequest]:
    """The Azure LLM inference trace CSV."""
    path = Path(path)
    rows = csv.DictReader(_read_text(path).splitlines())
    columns = _azure_header(path, rows.fieldnames)
    out = []
    for row in rows:
        where = f"{path}:{rows.line_num}"
        values = {c: row.get(columns[c]) for c in _AZURE_COLUMNS}
        for name, value in values.items():
            if value is None or not value.strip():
                raise ValueError(f'{where}: missing field "{name}"')
        out.append(
            TraceRequest(
                prompt_tokens=_count(where, "ContextTokens", values["ContextTokens"]),
                output_tokens=_count(where, "GeneratedTokens", values["GeneratedTokens"]),
                timestamp=_azure_time(where, values["TIMESTAMP"] or ""),
            )
        )
    return _non_empty(path, out)


# --- ShareGPT JSON -------------------------------------------------------------------------------


def _sharegpt_pairs(where: str, entry: Any) -> list[tuple[str, str]]:
    if not isinstance(entry, dict):
        raise ValueError(f'{where}: expected an object with "conversations", got {type(entry).__name__}')
    turns = _field(where, entry, "conversations")
    if not isinstance(turns, list):
        raise ValueError(
            f'{where}: field "conversations" must be a list of turns, got {type(turns).__name__}'
        )
    for index, turn in enumerate(turns):
        turn_where = f'{where}: field "conversations[{index}]"'
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise ValueError(f'{turn_where} must be an object with a string "value"')
    return [
        (first["value"], second["value"])
        for first, second in itertools.pairwise(turns)
        if first.get("from") == "human" and second.get("from") == "gpt"
    ]


def load_sharegpt(path: str | Path, *, count_tokens: CountTokens | None = None) -> list[TraceRequest]:
    """ShareGPT JSON: one request per conversation with a human turn followed by a reply."""
    path = Path(path)
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of conversations, got {type(data).__name__}")
    count = count_tokens or estimate_tokens
    out = []
    for index, entry in enumerate(data):
        pairs = _sharegpt_pairs(f"{path}: entry {index}", entry)
        if pairs:
            (prompt, reply), later = pairs[0], pairs[1:]
            followups = tuple((text, count(text), count(answer)) for text, answer in later)
            out.append(TraceRequest(count(prompt), count(reply), prompt=prompt, followups=followups))
    return _non_empty(path, out)


def _non_empty(path: str | Path, records: list[TraceRequest]) -> list[TraceRequest]:
    if not records:
        raise ValueError(f"{path}: the trace holds no usable request")
    return records


# Where each format keeps a request's arrival time (for --arrival trace).
TIME_FIELDS: Final = (
    'jsonl "timestamp" (seconds), mooncake "timestamp" (ms), azure TIMESTAMP; sharegpt has none'
)
TRACE_FORMATS: dict[str, Callable[[str | Path], list[TraceRequest]]] = {
    "azure": load_azure,
    "jsonl": load_jsonl,
    "mooncake": load_mooncake,
    "sharegpt": load_sharegpt,
}


def load_trace(path: str | Path, trace_format: str) -> list[TraceRequest]:
    """Load ``path`` in one of ``TRACE_FORMATS``."""
    key = trace_format.strip().lower()
    if key not in TRACE_FORMATS:
        raise ValueError(f'unknown trace format "{trace_format}"; valid: {", ".join(sorted(TRACE_FORMATS))}')
    return TRACE_FORMATS[key](path)
