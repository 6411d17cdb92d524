"""The workload a one-shot run's options describe: a preset or custom lengths, sessions, tool calls and
structured output, fitted to the target's context with prompts calibrated to its tokenizer."""

from __future__ import annotations

import dataclasses
from typing import Any

from exporter.load.distributions import parse_length_spec
from exporter.load.presets import preset
from exporter.load.prompts import ApproxPromptBuilder, PromptBuilder, SimPromptBuilder
from exporter.load.sessions import parse_think_time
from exporter.load.target_facts import CONTEXT_MARGIN, TargetFacts
from exporter.load.target_options import option_api
from exporter.load.workloads import IndependentLengths, Workload
from exporter.options.oneshot import OptionError, Options, json_object
from exporter.sim.presets import PRESETS as SIM_PRESETS
from exporter.sim.process import DEFAULT_PRESET as DEFAULT_SIM_PRESET


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
    limits = {
        "max_prompt_tokens": options["max_prompt_tokens"],
        "max_output_tokens": options["max_output_tokens"],
    }
    if options["prompt_tokens"] or options["output_tokens"]:
        if options["workload"]:
            raise OptionError("--workload and --prompt-tokens/--output-tokens exclude each other")
        workload = Workload("custom", _custom_lengths(options), builder, api, **limits)
    else:
        try:
            workload = preset(options["workload"] or "sharegpt", builder=builder, api=api, **limits)
        except ValueError as exc:
            raise OptionError(f"--workload: {exc}") from exc
    workload = session_options(workload, options)
    context = facts.context
    if context is None and simulated:
        context = SIM_PRESETS[options["sim_preset"] or DEFAULT_SIM_PRESET].engine.max_model_len
    return _fit_context(workload, options, context, exact=simulated)


def _fit_context(workload: Workload, options: Options, context: int | None, exact: bool) -> Workload:
    """Keep prompt + output within the target's context (the presets allow 16K prompts; a server
    answers 400 beyond ``max_model_len``). Calibrated prompts keep a margin for their residual error."""
    if context is None or options["max_prompt_tokens"] is not None:
        return workload  # the user's filter wins, and a 400 for an over-long request is a finding
    if not exact:
        context = int(context * (1 - CONTEXT_MARGIN))
    output_cap = min(workload.max_output_tokens or context // 2, context // 2)
    return workload.with_options(max_prompt_tokens=context - output_cap, max_output_tokens=output_cap)


def _custom_lengths(options: Options) -> IndependentLengths:
    specs = {
        "--prompt-tokens": options["prompt_tokens"] or 512,
        "--output-tokens": options["output_tokens"] or 128,
    }
    lengths = {}
    for flag, spec in specs.items():
        try:
            lengths[flag] = parse_length_spec(spec)
        except ValueError as exc:
            raise OptionError(f"{flag}: {exc}") from exc
    return IndependentLengths(lengths["--prompt-tokens"], lengths["--output-tokens"])


def session_options(workload: Workload, options: Options) -> Workload:
    """``--turns``, ``--think-time``, ``--tool-calls`` and ``--response-format`` applied to ``workload``."""
    changes: dict[str, Any] = {}
    turns = options.get("turns")
    if turns is not None and str(turns).strip() != "trace":
        try:
            changes["turns"] = None if str(turns).strip() == "1" else parse_length_spec(turns)
        except ValueError as exc:
            raise OptionError(f"--turns: {exc}") from exc
    if options.get("think_time") is not None:
        try:
            changes["think_time"] = parse_think_time(options["think_time"])
        except ValueError as exc:
            raise OptionError(f"--think-time: {exc}") from exc
    if options.get("tool_calls"):
        if workload.api == "completions":
            raise OptionError("--tool-calls: needs --api chat or responses")
        changes["tool_calls"] = True
    if options.get("response_format") is not None:
        changes["extra_body"] = (
            ("response_format", json_object(options["response_format"], "--response-format")),
        )
    session_turns_on = changes.get("turns", workload.turns) is not None or str(turns or "").strip() == "trace"
    if session_turns_on and changes.get("tool_calls", workload.tool_calls):
        raise OptionError(
            "--tool-calls and --turns above 1 exclude each other: a conversation would need tool results"
        )
    return dataclasses.replace(workload, **changes) if changes else workload
