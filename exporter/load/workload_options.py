"""The workload a one-shot run's flags describe (``exporter.settings.workload_flags``), built: a preset
or custom lengths, sessions, tool calls and structured output, fitted to the target's context with
prompts calibrated to its tokenizer."""

from __future__ import annotations

from exporter.load.presets import preset
from exporter.load.prompts import ApproxPromptBuilder, PromptBuilder, SimPromptBuilder
from exporter.load.target_facts import TargetFacts, context_fit_on, fit_to_context
from exporter.load.workloads import IndependentLengths, Workload, with_sessions
from exporter.settings.problems import SettingsError
from exporter.settings.target import Api
from exporter.settings.workload_flags import WorkloadFlags
from exporter.sim.engine_presets import PRESETS as SIM_PRESETS
from exporter.sim.process import DEFAULT_PRESET as DEFAULT_SIM_PRESET


def prompt_builder(facts: TargetFacts, simulated: bool) -> PromptBuilder:
    """Exact prompts for the simulator, calibrated ones where the target was asked, else approximate."""
    if facts.calibration is not None:
        return facts.calibration.builder
    return SimPromptBuilder() if simulated else ApproxPromptBuilder()


def build_workload(
    flags: WorkloadFlags,
    api: Api,
    simulated: bool,
    facts: TargetFacts | None = None,
    sim_preset: str | None = None,
) -> Workload:
    """The workload the flags describe, sent with ``api``: a preset or custom lengths, fitted to the
    target's context (the simulator's, of ``sim_preset``, or the ``max_model_len`` the target reported),
    with calibrated prompts."""
    facts = facts or TargetFacts()
    builder = prompt_builder(facts, simulated)
    spec = flags.spec
    prompts, outputs = flags.max_prompt_tokens, flags.max_output_tokens
    if spec.preset is not None:
        try:
            workload = preset(
                spec.preset, builder=builder, api=api, max_prompt_tokens=prompts, max_output_tokens=outputs
            )
        except ValueError as exc:
            raise SettingsError(f"--workload: {exc}") from exc
    else:
        assert spec.prompt_tokens is not None and spec.output_tokens is not None  # WorkloadOptions
        lengths = IndependentLengths(spec.prompt_tokens, spec.output_tokens)
        workload = Workload(
            "custom", lengths, builder, api, max_prompt_tokens=prompts, max_output_tokens=outputs
        )
    workload = with_sessions(workload, spec)
    context = served_context(simulated, facts, sim_preset)
    return fit_to_context(workload, context, simulated) if fits_context(flags) else workload


def served_context(simulated: bool, facts: TargetFacts | None, sim_preset: str | None = None) -> int | None:
    """The context the run fits its requests to: the target's ``max_model_len``, or the simulator's."""
    context = facts.context if facts is not None else None
    if context is None and simulated:
        context = SIM_PRESETS[sim_preset or DEFAULT_SIM_PRESET].engine.max_model_len
    return context


def fits_context(flags: WorkloadFlags) -> bool:
    """Whether a run's requests are fitted to the served context: unless ``--max-prompt-tokens`` is
    given, for the user's filter wins and a 400 for an over-long request is then a finding."""
    return context_fit_on(flags.max_prompt_tokens)


def context_fit_note(flags: WorkloadFlags) -> str:
    """What a run does to keep within the served context, for ``TargetFacts.describe``."""
    if fits_context(flags):
        return "each request's prompt + output is kept within it (the result says what that leaves out)"
    return "not fitted to it: --max-prompt-tokens was given, and a request over it is sent"
