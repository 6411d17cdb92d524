"""Preset workloads reproduce their documented statistics; workloads filter, seed and build requests."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from exporter.load.presets import preset
from exporter.load.prompts import ApproxPromptBuilder
from exporter.load.workloads import IndependentLengths, Workload, specs_with_lengths
from exporter.settings.lengths import Fixed, PairedLengths, Uniform
from exporter.settings.presets import PRESET_NAMES, PRESETS
from exporter.sim import tokenizer

SAMPLES = 5000
# Sampling error of a median/p90 of 5,000 log-normal draws with sigma <= 1.1 is below 2.5% (one
# standard error); 6% is 2.5 standard errors of the widest, with fixed seeds.
MEDIAN_TOLERANCE = 0.06
MEAN_TOLERANCE = 0.06


def test_the_suite_is_complete() -> None:
    assert set(PRESET_NAMES) == {"sharegpt", "lmsys", "mooncake", "azure-code", "arxiv-summarization", "bwb"}


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_preset_reproduces_its_documented_statistics(name: str) -> None:
    documented = PRESETS[name].stats
    prompts, outputs = preset(name).sample_lengths(SAMPLES, np.random.default_rng(2024))
    assert len(prompts) == len(outputs) == SAMPLES
    assert np.median(prompts) == pytest.approx(documented.prompt_median, rel=MEDIAN_TOLERANCE)
    assert np.percentile(prompts, 90) == pytest.approx(documented.prompt_p90, rel=MEDIAN_TOLERANCE)
    assert prompts.mean() == pytest.approx(documented.prompt_mean, rel=MEAN_TOLERANCE)
    # Tiny medians (azure-code's 8 tokens) are integers: allow one token either way.
    assert abs(np.median(outputs) - documented.output_median) <= max(
        1, MEDIAN_TOLERANCE * documented.output_median
    )
    assert np.percentile(outputs, 90) == pytest.approx(documented.output_p90, rel=MEDIAN_TOLERANCE, abs=1)
    assert outputs.mean() == pytest.approx(documented.output_mean, rel=MEAN_TOLERANCE)


@pytest.mark.parametrize("name", PRESET_NAMES)
def test_preset_filters_hold(name: str) -> None:
    workload = preset(name)
    prompts, outputs = workload.sample_lengths(SAMPLES, np.random.default_rng(9))
    assert prompts.max() <= (workload.max_prompt_tokens or 0)
    assert outputs.max() <= (workload.max_output_tokens or 0)
    assert prompts.min() >= 1 and outputs.min() >= 1


def test_headline_figures_from_the_issue() -> None:
    assert PRESETS["arxiv-summarization"].stats.prompt_median == pytest.approx(7800, rel=0.02)
    assert PRESETS["arxiv-summarization"].stats.output_median == pytest.approx(228, rel=0.02)
    assert PRESETS["bwb"].stats.prompt_median == pytest.approx(2400, rel=0.02)
    assert PRESETS["bwb"].stats.output_median == pytest.approx(3600, rel=0.02)
    assert PRESETS["azure-code"].stats.output_median == 8


def test_filters_can_be_overridden() -> None:
    workload = preset("mooncake", max_prompt_tokens=4096, max_output_tokens=128)
    prompts, outputs = workload.sample_lengths(500, np.random.default_rng(1))
    assert prompts.max() <= 4096 and outputs.max() <= 128


def test_the_description_names_only_the_filters_there_are() -> None:
    """Custom lengths have no filter unless asked: it said "filters prompt <= None, output <= None"."""
    custom = Workload("custom", IndependentLengths(Fixed(64), Fixed(16)), ApproxPromptBuilder())
    assert "; filters none; " in custom.describe()
    capped = dataclasses.replace(custom, max_output_tokens=8)
    assert "; filters output <= 8; " in capped.describe()
    assert (
        "; filters prompt <= 4096, output <= 128; "
        in preset("mooncake", max_prompt_tokens=4096, max_output_tokens=128).describe()
    )


def test_unknown_preset_names_the_options() -> None:
    with pytest.raises(ValueError) as caught:
        preset("chatt")
    assert str(caught.value) == (
        'unknown workload preset "chatt"; '
        "valid: sharegpt, lmsys, mooncake, azure-code, arxiv-summarization, bwb"
    )


def test_impossible_filters_are_an_error_not_a_hang() -> None:
    workload = Workload("tiny", IndependentLengths(Fixed(100), Fixed(10)), max_prompt_tokens=50)
    with pytest.raises(ValueError) as caught:
        workload.sample_lengths(10, np.random.default_rng(0))
    assert str(caught.value).startswith("workload tiny: only 0 of ")
    assert str(caught.value).endswith(" draws pass the filter max_prompt_tokens=50; loosen it")


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_sampled_specs_are_exact_unique_and_seeded(api: str) -> None:
    workload = preset("sharegpt", api=api)  # type: ignore[arg-type]
    specs = workload.sample(40, np.random.default_rng(3))
    again = workload.sample(40, np.random.default_rng(3))
    # The seed fixes the lengths; the texts are new on every run, so a repeated run with the same seed
    # finds none of its prompts in an engine's prefix cache.
    assert [(s.prompt_tokens, s.max_tokens) for s in specs] == [
        (s.prompt_tokens, s.max_tokens) for s in again
    ]
    assert not {s.prompt for s in specs} & {s.prompt for s in again}
    assert len({s.prompt for s in specs}) == 40
    assert len({s.request_id for s in specs}) == 40
    for spec in specs:
        if api == "chat":
            assert spec.messages is not None
            counted = tokenizer.count_chat_tokens([{"role": r, "content": c} for r, c in spec.messages])
        else:
            assert spec.messages is None
            counted = len(tokenizer.encode(spec.prompt))
        assert counted == spec.prompt_tokens
        assert 1 <= spec.max_tokens <= 1024
    assert workload.prompt_tokens_exact


def test_approximate_builder_marks_the_workload() -> None:
    workload = preset("lmsys", builder=ApproxPromptBuilder())
    assert not workload.prompt_tokens_exact
    spec = workload.sample(1, np.random.default_rng(0))[0]
    assert len(spec.prompt.split()) == spec.prompt_tokens


def test_paired_lengths_keep_trace_pairs_together() -> None:
    pairs = PairedLengths((10, 2000, 30), (1, 2, 3))
    prompts, outputs = pairs.sample(300, np.random.default_rng(0))
    assert {(int(p), int(o)) for p, o in zip(prompts, outputs, strict=True)} == {(10, 1), (2000, 2), (30, 3)}
    with pytest.raises(ValueError, match="need as many prompt as output lengths"):
        PairedLengths((1, 2), (1,))


def test_specs_with_lengths_in_order() -> None:
    workload = Workload("w", IndependentLengths(Uniform(1, 2), Fixed(1)), api="completions")
    specs = specs_with_lengths(workload, [(5, 7), (9, 1)], salt=3)
    assert [(s.prompt_tokens, s.max_tokens) for s in specs] == [(5, 7), (9, 1)]
    assert [len(tokenizer.encode(s.prompt)) for s in specs] == [5, 9]
    assert specs[0].request_id == "w-0000000003-0"


def test_workload_validation_messages() -> None:
    lengths = IndependentLengths(Fixed(1), Fixed(1))
    with pytest.raises(ValueError) as caught:
        Workload("w", lengths, api="embeddings")  # type: ignore[arg-type]
    assert str(caught.value) == 'workload w: unknown api "embeddings"; valid: chat, completions, responses'
    with pytest.raises(ValueError) as caught:
        Workload("w", lengths, max_output_tokens=0)
    assert str(caught.value) == "workload w: max_output_tokens must be >= 1, got 0"
    assert dataclasses.replace(preset("bwb"), max_prompt_tokens=None).max_prompt_tokens is None
