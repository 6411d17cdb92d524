"""What the daemon logs of a target's context and of each module's fit to it: pure lines, by case."""

from __future__ import annotations

import logging

import pytest

from exporter.daemon.served_context import context_line, fit_line
from exporter.load.target_facts import ContextAnswer
from exporter.load.workloads import IndependentLengths, Workload
from exporter.settings.lengths import Fixed, Uniform


@pytest.mark.parametrize(
    ("answer", "tokens", "says"),
    [
        (ContextAnswer(error="refused"), None, "could not ask target t its context (refused); its probes are sent as configured"),
        (ContextAnswer(error="refused"), 2048, "its probes are fitted to the 2048 tokens it said before until it answers"),
        (ContextAnswer(), None, "target t does not say its context (no max_model_len from GET /v1/models)"),
        (ContextAnswer(tokens=2048), 2048, "target t serves 2048 tokens (max_model_len of GET /v1/models)"),
    ],
)  # fmt: skip
def test_the_context_line_says_what_the_probes_are_fitted_to(
    answer: ContextAnswer, tokens: int | None, says: str
) -> None:
    assert says in context_line("t", answer, tokens)


def workload(
    prompts: Fixed | Uniform, *, max_prompt_tokens: int | None = None, max_total_tokens: int | None = None
) -> Workload:
    lengths = IndependentLengths(prompts, Fixed(8))
    return Workload("w", lengths, max_prompt_tokens=max_prompt_tokens, max_total_tokens=max_total_tokens)


@pytest.mark.parametrize(
    ("tokens", "fitted", "level", "says"),
    [
        (None, workload(Fixed(64)), logging.DEBUG, "probes of t/m are sent as configured"),
        (512, workload(Fixed(64), max_prompt_tokens=64), logging.WARNING, "the module sets max_prompt_tokens"),
        (512, workload(Fixed(64), max_total_tokens=512), logging.INFO, "every request fits the 512 tokens t serves"),
        (512, workload(Uniform(8, 1000), max_total_tokens=512), logging.WARNING, "cut to fit the 512 tokens t serves: prompt + output <= 512"),
    ],
)  # fmt: skip
def test_the_fit_line_says_how_a_module_meets_the_context(
    tokens: int | None, fitted: Workload, level: int, says: str
) -> None:
    said_level, line = fit_line("t", "m", tokens, fitted)
    assert said_level == level and says in line
