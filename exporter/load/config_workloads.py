"""The workloads a config's modules send: built here from the settings' plain data, and the config
checks that need one (a module's length filters, a run within a target's token budget).

``exporter.settings`` reads and checks what a file says; whether a module's draws survive its filters
takes a ``Workload`` to draw from, so those checks are handed to the config reader by its callers
(``CONFIG_CHECKS``) and run with its own checks across sections: every problem is still said at once.
"""

from __future__ import annotations

import numpy as np

from exporter.load.calibration import Calibration
from exporter.load.presets import preset
from exporter.load.prompts import ApproxPromptBuilder, PromptBuilder, SimPromptBuilder
from exporter.load.target_facts import context_fit_on, fit_to_context
from exporter.load.workloads import IndependentLengths, LengthSource, Workload, with_sessions
from exporter.settings import bounds
from exporter.settings.model import Config, Module, Target
from exporter.settings.parse import ConfigCheck, unread
from exporter.settings.reader import Context


def prompt_builder(target: Target) -> PromptBuilder:
    """Exact prompts for the simulator's tokenizer, approximate ones for any other server."""
    return SimPromptBuilder() if target.simulated else ApproxPromptBuilder()


def workload_for(module: Module, target: Target) -> Workload:
    """``module``'s workload as sent to ``target`` (its api, its prompt builder, the filters)."""
    builder, spec = prompt_builder(target), module.workload
    if spec.preset is not None:
        return with_sessions(
            preset(
                spec.preset,
                builder=builder,
                api=target.api,
                max_prompt_tokens=module.max_prompt_tokens,
                max_output_tokens=module.max_output_tokens,
            ),
            spec,
        )
    lengths: LengthSource
    if spec.trace is not None:
        lengths = spec.trace
    else:
        assert spec.prompt_tokens is not None and spec.output_tokens is not None  # __post_init__
        lengths = IndependentLengths(spec.prompt_tokens, spec.output_tokens)
    return with_sessions(
        Workload(
            module.name, lengths, builder, target.api, module.max_prompt_tokens, module.max_output_tokens
        ),
        spec,
    )


def fitted_workload(
    module: Module, target: Target, context: int | None, calibration: Calibration | None
) -> Workload:
    """The workload as sent to ``target``: its prompts calibrated when ``calibration`` fitted, and
    fitted to the ``context`` it serves by the one-shot run's rule, unless ``max_prompt_tokens`` is
    set (as ``--max-prompt-tokens`` turns the fit off). The daemon's probes and capacity jobs alike."""
    workload = workload_for(module, target)
    if calibration is not None and calibration.tokens_per_word is not None:
        workload = workload.with_options(builder=calibration.builder)
    if not context_fit_on(module.max_prompt_tokens):
        return workload
    return fit_to_context(workload, context, exact=target.simulated)


def config_workload(config: Config, target: str, module: str) -> Workload:
    """The workload the module named ``module`` sends to the target named ``target``."""
    return workload_for(config.module(module), config.target(target))


def check_filters(ctx: Context, config: Config) -> None:
    """A workload whose length filters reject (nearly) every draw is an error now, not at run time."""
    for name, module in config.modules.items():
        if unread(ctx, f"modules.{name}"):
            continue
        workload = workload_for(module, Target("check", "http://check"))
        try:
            workload.sample_lengths(1, np.random.default_rng(0))
        except ValueError as exc:
            ctx.problems.add(f"modules.{name}", _ceiling_problem(workload) or str(exc))


def _ceiling_problem(workload: Workload) -> str | None:
    """Why no draw is kept when it is the ceilings' doing (lengths no request may have)."""
    prompts, outputs = workload.lengths.sample(256, np.random.default_rng(0))
    for what, drawn, ceiling in (
        ("prompt", prompts, bounds.MAX_PROMPT_TOKENS),
        ("output", outputs, bounds.MAX_OUTPUT_TOKENS),
    ):
        if int(drawn.min()) > ceiling:
            return (
                f"workload {workload.name}: every {what} length drawn is above the ceiling of "
                f"{ceiling} tokens a request may have (e.g. {int(drawn.min())})"
            )
    return None


def check_token_budgets(ctx: Context, config: Config) -> None:
    """A whole run of every module a target probes must fit the target's hourly token budget (a run
    over it is skipped every time, without a word)."""
    rng = np.random.default_rng(0)
    for index, target in enumerate(config.targets):
        budget, path = target.budget, f"targets[{index}].budget"
        if budget.max_tokens_per_hour is None or unread(ctx, f"{path}.max_tokens_per_hour"):
            continue
        for name in target.modules:
            module = config.modules.get(name)
            if module is None or unread(ctx, f"modules.{name}") or module.problem_with(target) is not None:
                continue  # unknown, read as defaults in place of bad values, or refused by its api
            try:
                prompts, outputs = workload_for(module, target).sample_lengths(256, rng)
            except ValueError:
                continue  # reported by the module's own check
            runs = module.requests_per_run
            least = runs * int((prompts + outputs).min())
            if least > budget.max_tokens_per_hour:
                ctx.problems.add(
                    f"{path}.max_tokens_per_hour",
                    f"{budget.max_tokens_per_hour} is below the smallest run of modules.{name} "
                    f"({runs} requests, at least {least} tokens): that module could never run",
                )


# What the config's readers are handed by the daemon and check-config: the checks that draw workloads.
CONFIG_CHECKS: tuple[ConfigCheck, ...] = (check_filters, check_token_budgets)
