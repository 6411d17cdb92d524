"""The workload a one-shot run's flags describe: a preset or custom lengths, sessions, tool calls and
structured output, and the length filters.

The flags are read as a daemon config module's ``workload`` is, by ``exporter.settings.workload``:
``workload_tree`` puts their values in that shape and ``WORKLOAD_FLAGS`` names the flag of each config
path, so a bad value fails with the config's message under the flag's name. The workload itself is
built from these values by ``exporter.load.workload_options``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from exporter.settings.oneshot import FlagReading, RawFlags, json_object, read_flags
from exporter.settings.presets import PRESET_SESSIONS
from exporter.settings.problems import SettingsError
from exporter.settings.reader import Section
from exporter.settings.target import Api
from exporter.settings.workload import (
    TOOL_CALL_APIS,
    TOOLS_AND_TURNS,
    WorkloadOptions,
    read_workload,
    tool_calls_problem,
)

DEFAULT_PRESET = "sharegpt"  # a run given neither --workload nor custom lengths
# The other length of a custom workload given one of --prompt-tokens/--output-tokens (a run's fixed
# lengths, where a daemon probe's default prompt lengths vary: WorkloadOptions).
CUSTOM_LENGTHS: Final = {"prompt_tokens": 512, "output_tokens": 128}
# The flag that gives each part of a workload (a config path, as the reader reports problems under it).
WORKLOAD_FLAGS: Final = {
    "workload": "",  # a problem of the workload as a whole names its flags in its message
    "workload.preset": "--workload",
    "workload.prompt_tokens": "--prompt-tokens",
    "workload.output_tokens": "--output-tokens",
    "workload.turns": "--turns",
    "workload.think_time": "--think-time",
    "workload.tool_calls": "--tool-calls",
    "workload.response_format": "--response-format",
}


@dataclass(frozen=True)
class WorkloadFlags:
    """The workload flags read: what to send (``spec``) and the length filters (None: the preset's own)."""

    spec: WorkloadOptions
    max_prompt_tokens: int | None = None
    max_output_tokens: int | None = None


def read_workload_flags(raw: RawFlags, api: Api | None) -> WorkloadFlags:
    """The workload flags read and checked, with nothing asked of the target, so that a bad flag costs
    no wait; ``api`` is ``--api`` read (None: a bad one, said by the target flags), for tool calls."""
    reading = FlagReading()
    spec = reading(lambda: read_flags(workload_tree(raw), ("workload",), _read, WORKLOAD_FLAGS))
    reading(lambda: _check_flags_only(raw, api))
    reading.done()
    assert spec is not None
    return WorkloadFlags(spec, raw.get("max_prompt_tokens"), raw.get("max_output_tokens"))


def replays_trace_turns(raw: RawFlags) -> bool:
    """``--turns trace``: the conversations of the replayed trace (the load plan replays them)."""
    return str(raw.get("turns") or "").strip() == "trace"


def workload_tree(raw: RawFlags) -> dict[str, Any]:
    """The workload flags given, as a daemon config module's ``workload`` mapping."""
    custom = bool(raw.get("prompt_tokens") or raw.get("output_tokens"))
    lengths = {key: raw.get(key) or default for key, default in CUSTOM_LENGTHS.items()} if custom else {}
    response_format = raw.get("response_format")
    values = {
        "preset": raw.get("workload") or (None if custom else DEFAULT_PRESET),
        **lengths,
        "turns": None if replays_trace_turns(raw) else raw.get("turns"),
        "think_time": raw.get("think_time"),
        "tool_calls": True if raw.get("tool_calls") else None,
        "response_format": (
            json_object(response_format, "--response-format") if response_format is not None else None
        ),
    }
    return {"workload": {key: value for key, value in values.items() if value is not None}}


def _read(sec: Section) -> WorkloadOptions:
    return read_workload(sec, PRESET_SESSIONS)


def _check_flags_only(raw: RawFlags, api: Api | None) -> None:
    """What only the flags can get wrong: a length filter under one token (0 read as "not given" ran
    the preset's own filter), tool calls for an API without them, and with ``--turns trace``; ``--turns
    trace`` or ``--trace-format`` without a trace."""
    problems = [problem for problem in (_filter_problems(raw), _trace_problem(raw)) if problem]
    if raw.get("tool_calls"):
        if api is not None and tool_calls_problem(True, api) is not None:
            problems.append(f"--tool-calls: needs --api {' or '.join(TOOL_CALL_APIS)}")
        if replays_trace_turns(raw):
            problems.append(TOOLS_AND_TURNS.format("--tool-calls", "--turns"))
    if replays_trace_turns(raw) and not raw.get("trace"):
        # Without a trace there are no conversations to replay: it ran as single requests, without a word.
        problems.append(
            "--turns trace: needs --trace (the conversation trace whose turns it replays)"
            if "trace" in raw
            else "--turns trace: only bench replays a trace's turns; give N or a distribution"
        )
    if problems:
        raise SettingsError("; ".join(problems))


def _filter_problems(raw: RawFlags) -> str:
    """A length filter under one token, for each of the two."""
    problems = []
    for key in ("max_prompt_tokens", "max_output_tokens"):
        value = raw.get(key)
        if value is not None and value < 1:
            problems.append(f"--{key.replace('_', '-')} must be >= 1 token, got {value}")
    return "; ".join(problems)


def _trace_problem(raw: RawFlags) -> str:
    """``--trace-format`` without ``--trace``: taken, and nothing replayed, silently."""
    if raw.get("trace_format") and not raw.get("trace"):
        return "--trace-format: needs --trace (the file whose format it names)"
    return ""
