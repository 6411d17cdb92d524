"""The workload a one-shot run's flags describe, fitted to the target's context: prompt + output
together must fit what the server serves (less the margin calibrated prompts keep), and a workload none
of whose requests fit is refused with the context named, not filters the user never set."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from exporter.cli.bench import add_arguments
from exporter.cli.flags import merged_options
from exporter.load.target_facts import CONTEXT_MARGIN, TargetFacts
from exporter.load.workload_options import build_workload, context_fit_note
from exporter.settings.bench_options import BenchOptions, read_bench_options

SERVED = 8192  # the simulator's context (sim presets), as /v1/models reports it
CALIBRATED_ROOM = int(SERVED * (1 - CONTEXT_MARGIN))


def bench_options(*flags: str) -> BenchOptions:
    """``bench``'s options as its command line gives them."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return read_bench_options(merged_options(parser.parse_args(list(flags))))


def lengths(*flags: str, simulated: bool) -> tuple[np.ndarray, np.ndarray]:
    facts = TargetFacts(context=None if simulated else SERVED)
    options = bench_options(*flags)
    workload = build_workload(options.workload, options.target.settings.api, simulated, facts)
    return workload.sample_lengths(200, np.random.default_rng(0))


@pytest.mark.parametrize("simulated", [True, False])
def test_a_long_output_leaves_the_rest_of_the_context_to_the_prompt(simulated: bool) -> None:
    # 4000 + 2000 fits 8192 (and 7946): an even split of the context refused every request.
    prompts, outputs = lengths(
        "--prompt-tokens", "fixed:4000", "--output-tokens", "fixed:2000", simulated=simulated
    )
    assert (prompts == 4000).all() and (outputs == 2000).all()


@pytest.mark.parametrize(("simulated", "room"), [(True, SERVED), (False, CALIBRATED_ROOM)])
def test_prompt_and_output_together_stay_within_the_context(simulated: bool, room: int) -> None:
    prompts, outputs = lengths(
        *["--prompt-tokens", "uniform:low=1000,high=7000", "--output-tokens", "uniform:low=500,high=3000"],
        simulated=simulated,
    )
    assert (prompts + outputs <= room).all()
    assert (prompts + outputs > room - 300).any()  # the context is used, not halved


def test_a_workload_that_cannot_fit_names_the_served_context() -> None:
    with pytest.raises(ValueError) as caught:
        lengths("--prompt-tokens", "fixed:6000", "--output-tokens", "fixed:2500", simulated=False)
    message = str(caught.value)
    assert message.startswith("workload custom: only 0 of ")
    assert message.endswith(
        f" draws fit the served context (prompt + output <= {CALIBRATED_ROOM} tokens); "
        "ask for shorter prompts or outputs"
    )


def test_the_users_filter_turns_the_fit_off() -> None:
    prompts, outputs = lengths(
        *["--prompt-tokens", "fixed:6000", "--output-tokens", "fixed:2500", "--max-prompt-tokens", "9000"],
        simulated=False,
    )
    assert (prompts + outputs == 8500).all()  # over the context: the server's 400s are the finding


@pytest.mark.parametrize(
    ("flags", "note"),
    [
        ([], "each request's prompt + output is kept within it (the result says what that leaves out)"),
        (
            ["--max-prompt-tokens", "9000"],
            "not fitted to it: --max-prompt-tokens was given, and a request over it is sent",
        ),
    ],
)
def test_the_context_line_says_whether_requests_were_fitted(flags: list[str], note: str) -> None:
    facts = TargetFacts(context=SERVED)
    assert facts.describe(context_fit_note(bench_options(*flags).workload)) == [
        f"context: the server serves {SERVED} tokens (max_model_len); {note}"
    ]
