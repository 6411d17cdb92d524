"""The workload a probe or a run sends, defined once and read one way from the daemon config and the flags.

``WorkloadOptions`` holds a workload with its defaults: a preset by name, or independent prompt and
output length distributions (``exporter.settings.lengths``), and its sessions: turns, think time
(``exporter.settings.think_time``), tool calls and structured output. ``read_workload`` reads one from a
``Section`` shaped as a daemon config module (``modules.<name>``, whose ``workload`` is a preset's name
or a mapping); the flags (``--workload``, ``--prompt-tokens``, ``--turns``...) are put in that shape by
``exporter.settings.workload_flags`` and read by the same function, so a bad value fails with the same
message under its path or its flag. The jobs API names a module instead of a workload.

The presets and the trace formats are ``exporter.load``'s: the caller passes the presets' names (each
with whether its requests come in sessions), and the config passes how to read a ``trace`` mapping (the
flags replay a trace in the load plan instead).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from exporter.settings.lengths import Fixed, LengthDistribution, LogNormal, length_spec
from exporter.settings.reader import Section, show
from exporter.settings.target import Api
from exporter.settings.think_time import ThinkTime, think_spec

LENGTH_KEYS: Final = ("preset", "prompt_tokens", "output_tokens")
TRACE_KEYS: Final = ("trace", "format")
SESSION_KEYS: Final = ("turns", "think_time", "tool_calls", "response_format")
TOOLS_AND_TURNS: Final = "{} and {} above 1 exclude each other (a conversation would need tool results)"
# The APIs whose request body can name a tool (``exporter.streams.openai``): completions has no ``tools``.
TOOL_CALL_APIS: Final[tuple[Api, ...]] = ("chat", "responses")


@dataclass(frozen=True)
class WorkloadOptions:
    """A preset by name or independent prompt and output lengths, and how requests form sessions.

    The default is a probe's: short prompts (median 512 tokens) and 128-token answers, single requests.
    """

    preset: str | None = None
    prompt_tokens: LengthDistribution | None = field(default_factory=lambda: LogNormal(512, 0.5))
    output_tokens: LengthDistribution | None = field(default_factory=lambda: Fixed(128))
    turns: LengthDistribution | None = None  # turns per session (None: the preset's, else single requests)
    think_time: ThinkTime | None = None  # between turns (None: the default, ``options.think_time``)
    tool_calls: bool = False  # ask for a tool call instead of text
    response_format: str | None = None  # structured output: the response_format object as JSON text

    def __post_init__(self) -> None:
        if self.brings_lengths():
            object.__setattr__(self, "prompt_tokens", None)
            object.__setattr__(self, "output_tokens", None)
        elif self.prompt_tokens is None or self.output_tokens is None:
            raise ValueError("a workload without a preset or trace needs prompt_tokens and output_tokens")

    def brings_lengths(self) -> bool:
        """Whether the lengths come from elsewhere than the two distributions (here: a preset)."""
        return self.preset is not None

    def single_requests(self) -> bool:
        """Whether ``turns`` asks for no sessions (none given, or exactly one turn)."""
        return self.turns is None or (isinstance(self.turns, Fixed) and self.turns.value == 1)


TraceReader = Callable[[Section], WorkloadOptions]
Presets = Mapping[str, bool]  # each preset's name, and whether its requests come in sessions


def read_workload(sec: Section, presets: Presets, read_trace: TraceReader | None = None) -> WorkloadOptions:
    """``workload`` of a module-shaped mapping: a preset's name, or a mapping of one source of lengths
    (a preset, a trace when ``read_trace`` reads one, or two distributions) and the sessions."""
    raw = sec.get("workload")
    if raw is None:
        return WorkloadOptions()
    if isinstance(raw, str):
        return sec.read("workload", WorkloadOptions(), lambda v: preset_options(v, presets), resolve=False)
    keys = (*LENGTH_KEYS, *(TRACE_KEYS if read_trace is not None else ()), *SESSION_KEYS)
    workload = Section.open(raw, sec.at("workload"), sec.problems, keys)
    if workload is None:
        return WorkloadOptions()
    return read_sessions(workload, _lengths(workload, presets, read_trace), presets)


def _lengths(sec: Section, presets: Presets, read_trace: TraceReader | None) -> WorkloadOptions:
    """The one source of lengths of a workload mapping."""
    if sec.has("preset"):
        if read_trace is not None and any(sec.has(key) for key in (*LENGTH_KEYS[1:], *TRACE_KEYS)):
            sec.complain("give one of {}, {} (with {}) or {}/{}", ("preset", *TRACE_KEYS, *LENGTH_KEYS[1:]))
        elif any(sec.has(key) for key in LENGTH_KEYS[1:]):
            sec.complain("give one of {} or {}/{}", LENGTH_KEYS)
        return sec.read("preset", WorkloadOptions(), lambda v: preset_options(v, presets), resolve=False)
    if read_trace is not None and any(sec.has(key) for key in TRACE_KEYS):
        return read_trace(sec)
    default = WorkloadOptions()
    return WorkloadOptions(
        prompt_tokens=sec.read("prompt_tokens", default.prompt_tokens, length_spec),
        output_tokens=sec.read("output_tokens", default.output_tokens, length_spec),
    )


def read_sessions(sec: Section, spec: WorkloadOptions, presets: Presets) -> WorkloadOptions:
    """``turns``, ``think_time``, ``tool_calls`` and ``response_format`` of a workload mapping; tool
    calls exclude sessions, given as ``turns`` or a preset's own."""
    spec = replace(
        spec,
        turns=sec.read("turns", None, length_spec),
        think_time=sec.read("think_time", None, think_spec, resolve=False),
        tool_calls=sec.boolean("tool_calls", False),
        response_format=sec.read("response_format", None, response_format_spec, resolve=False),
    )
    sessions = presets.get(spec.preset or "", False) if spec.turns is None else not spec.single_requests()
    if spec.tool_calls and sessions:
        sec.complain(TOOLS_AND_TURNS, ("tool_calls", "turns"))
    return spec


def tool_calls_problem(tool_calls: bool, api: str) -> str | None:
    """Why a workload cannot be sent with ``api`` (None when it can): the one rule the flags, the
    config and the workload itself apply, so that what a check accepts also runs."""
    if tool_calls and api not in TOOL_CALL_APIS:
        return f"tool calls need api {' or '.join(TOOL_CALL_APIS)}, not {api}"
    return None


def preset_options(value: Any, presets: Presets) -> WorkloadOptions:
    """The workload of the preset named ``value`` (one of ``presets``, in any case)."""
    if not isinstance(value, str):  # a list or a mapping is no name (nor hashable)
        raise ValueError(f"must be a workload preset's name, got {show(value)}; valid: {', '.join(presets)}")
    name = value.strip().lower()
    if name not in presets:
        raise ValueError(f"unknown workload preset {show(value)}; valid: {', '.join(presets)}")
    return WorkloadOptions(preset=name)


def response_format_spec(value: Any) -> str:
    """A ``response_format`` object (``{type: json_schema, ...}``) as JSON text."""
    if not isinstance(value, Mapping) or not isinstance(value.get("type"), str):
        raise ValueError(
            'must be a response_format object with a "type", e.g. {type: json_schema, json_schema: {...}}, '
            f"got {show(value)}"
        )
    try:  # JSON's own data (a YAML date or NaN is not), its keys made strings before they are sorted
        plain = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"must be JSON data: {exc}") from None
    return json.dumps(plain, sort_keys=True)
