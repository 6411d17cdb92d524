"""The workload a one-shot run's options describe: a preset or custom lengths, sessions, tool calls and
structured output, fitted to the target's context with prompts calibrated to its tokenizer.

The flags are read as a daemon config module's ``workload`` is, by ``exporter.settings.workload``:
``workload_tree`` puts their values in that shape and ``WORKLOAD_FLAGS`` names the flag of each config
path, so a bad value fails with the config's message under the flag's name.
"""

from __future__ import annotations

from typing import Any, Final

from exporter.load.presets import preset
from exporter.load.prompts import ApproxPromptBuilder, PromptBuilder, SimPromptBuilder
from exporter.load.target_facts import TargetFacts, context_fit_on, fit_to_context
from exporter.load.target_options import option_api
from exporter.load.workloads import IndependentLengths, Workload, with_sessions
from exporter.settings.oneshot import Options, json_object, read_flags
from exporter.settings.presets import PRESET_SESSIONS
from exporter.settings.problems import SettingsError
from exporter.settings.reader import Section
from exporter.settings.workload import (
    TOOL_CALL_APIS,
    TOOLS_AND_TURNS,
    WorkloadOptions,
    read_workload,
    tool_calls_problem,
)
from exporter.sim.presets import PRESETS as SIM_PRESETS
from exporter.sim.process import DEFAULT_PRESET as DEFAULT_SIM_PRESET

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


def prompt_builder(facts: TargetFacts, simulated: bool) -> PromptBuilder:
    """Exact prompts for the simulator, calibrated ones where the target was asked, else approximate."""
    if facts.calibration is not None:
        return facts.calibration.builder
    return SimPromptBuilder() if simulated else ApproxPromptBuilder()


def workload_from_options(options: Options, simulated: bool, facts: TargetFacts | None = None) -> Workload:
    """The workload the flags describe: a preset or custom lengths, fitted to the target's context
    (the simulator's, or the ``max_model_len`` the target reported), with calibrated prompts."""
    facts = facts or TargetFacts()
    builder = prompt_builder(facts, simulated)
    api = option_api(options)
    spec = checked_workload_options(options)
    limits = {
        "max_prompt_tokens": options["max_prompt_tokens"],
        "max_output_tokens": options["max_output_tokens"],
    }
    if spec.preset is not None:
        try:
            workload = preset(spec.preset, builder=builder, api=api, **limits)
        except ValueError as exc:
            raise SettingsError(f"--workload: {exc}") from exc
    else:
        assert spec.prompt_tokens is not None and spec.output_tokens is not None  # WorkloadOptions
        lengths = IndependentLengths(spec.prompt_tokens, spec.output_tokens)
        workload = Workload("custom", lengths, builder, api, **limits)
    workload = with_sessions(workload, spec)
    return _fit_context(workload, options, served_context(options, simulated, facts), exact=simulated)


def served_context(options: Options, simulated: bool, facts: TargetFacts | None) -> int | None:
    """The context the run fits its requests to: the target's ``max_model_len``, or the simulator's."""
    context = facts.context if facts is not None else None
    if context is None and simulated:
        context = SIM_PRESETS[options["sim_preset"] or DEFAULT_SIM_PRESET].engine.max_model_len
    return context


def checked_workload_options(options: Options) -> WorkloadOptions:
    """The workload flags read and checked, with nothing asked of the target: a command calls it
    before it starts a simulator or sends anything, so that a bad flag costs no wait."""
    spec = read_flags(workload_tree(options), ("workload",), _read, WORKLOAD_FLAGS)
    _check_flags_only(options, option_api(options))
    return spec


def workload_tree(options: Options) -> dict[str, Any]:
    """The workload options given, as a daemon config module's ``workload`` mapping."""
    custom = bool(options["prompt_tokens"] or options["output_tokens"])
    lengths = {key: options[key] or default for key, default in CUSTOM_LENGTHS.items()} if custom else {}
    turns = options.get("turns")
    given = {
        "preset": options["workload"] or (None if custom else DEFAULT_PRESET),
        **lengths,
        "turns": None if _trace_turns(options) else turns,
        "think_time": options.get("think_time"),
        "tool_calls": True if options.get("tool_calls") else None,
        "response_format": (
            json_object(options["response_format"], "--response-format")
            if options.get("response_format") is not None
            else None
        ),
    }
    return {"workload": {key: value for key, value in given.items() if value is not None}}


def _read(sec: Section) -> WorkloadOptions:
    return read_workload(sec, PRESET_SESSIONS)


def _trace_turns(options: Options) -> bool:
    """``--turns trace``: the conversations of the replayed trace (the load plan reads them)."""
    return str(options.get("turns") or "").strip() == "trace"


def _check_flags_only(options: Options, api: str) -> None:
    """What only the flags can get wrong: a length filter under one token (0 read as "not given" ran
    the preset's own filter), tool calls for an API without them, and with ``--turns trace``; ``--turns
    trace`` or ``--trace-format`` without a trace."""
    for key in ("max_prompt_tokens", "max_output_tokens"):
        if options[key] is not None and options[key] < 1:
            raise SettingsError(f"--{key.replace('_', '-')} must be >= 1 token, got {options[key]}")
    if options.get("trace_format") and not options.get("trace"):  # taken, and nothing replayed, silently
        raise SettingsError("--trace-format: needs --trace (the file whose format it names)")
    if options.get("tool_calls"):
        if tool_calls_problem(True, api) is not None:
            raise SettingsError(f"--tool-calls: needs --api {' or '.join(TOOL_CALL_APIS)}")
        if _trace_turns(options):
            raise SettingsError(TOOLS_AND_TURNS.format("--tool-calls", "--turns"))
    if _trace_turns(options) and not options.get("trace"):
        # Without a trace there are no conversations to replay: it ran as single requests, without a word.
        raise SettingsError(
            "--turns trace: needs --trace (the conversation trace whose turns it replays)"
            if "trace" in options
            else "--turns trace: only bench replays a trace's turns; give N or a distribution"
        )


def fits_context(options: Options) -> bool:
    """Whether a run's requests are fitted to the served context: unless ``--max-prompt-tokens`` is
    given, for the user's filter wins and a 400 for an over-long request is then a finding."""
    return context_fit_on(options["max_prompt_tokens"])


def context_fit_note(options: Options) -> str:
    """What a run does to keep within the served context, for ``TargetFacts.describe``."""
    if fits_context(options):
        return "each request's prompt + output is kept within it (the result says what that leaves out)"
    return "not fitted to it: --max-prompt-tokens was given, and a request over it is sent"


def _fit_context(workload: Workload, options: Options, context: int | None, exact: bool) -> Workload:
    """``fit_to_context`` unless ``--max-prompt-tokens`` was given (``fits_context``)."""
    return fit_to_context(workload, context, exact) if fits_context(options) else workload
