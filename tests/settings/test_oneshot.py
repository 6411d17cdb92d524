"""Problems that name other settings: each is named by its key in a config's message and by its flag on
the command line, through the same renaming as the problem's own path (``oneshot.flag_problem``)."""

from __future__ import annotations

import argparse
import pickle
from typing import Any

import pytest

from exporter.cli.bench import add_arguments as add_bench_arguments
from exporter.cli.capacity import add_arguments
from exporter.cli.flags import merged_options
from exporter.settings.bench_options import read_bench_options
from exporter.settings.capacity_options import capacity_params, read_capacity_options
from exporter.settings.job_params import JobLimits
from exporter.settings.job_parse import parse_params
from exporter.settings.oneshot import flag_problem
from exporter.settings.problems import Problem, Problems, SettingsError, SpecError, literal
from exporter.settings.reader import Section, show

FLAGS = {
    "slo.decode_tier": "--decode-tier",
    "slo.decode_deadline_s": "--decode-deadline",
    "a": "",
    "a.b": "--b",
    "a.c": "--c",
}


def test_a_mentioned_setting_is_its_key_in_a_config_and_its_flag_on_the_command_line() -> None:
    problems = Problems()
    sec = Section({"decode_tier": "x"}, "slo", problems, ["decode_tier", "decode_deadline_s"])
    sec.fail("decode_tier", f"unknown tier {literal(show('{x}'))} (or give {{}})", ("decode_deadline_s",))
    (problem,) = problems.items
    assert problem == 'slo.decode_tier: unknown tier "{x}" (or give decode_deadline_s)'
    assert flag_problem(problem, FLAGS) == '--decode-tier: unknown tier "{x}" (or give --decode-deadline)'
    assert pickle.loads(pickle.dumps(problem)) == problem  # problems travel from worker processes


def test_a_problem_where_no_single_flag_applies_names_the_flags_in_its_message() -> None:
    problems = Problems()
    Section({}, "a", problems, ()).complain("{} and {} exclude each other", ("b", "c"))
    assert problems.items == ["a: b and c exclude each other"]
    assert flag_problem(problems.items[0], FLAGS) == "--b and --c exclude each other"


def test_the_wrong_part_of_a_spec_is_named_by_the_flag_that_gave_it() -> None:
    def bad_rate(value: object) -> object:
        raise SpecError('poisson: field "rate" must be a number > 0', "rate")

    problems = Problems()
    Section({"arrival": "poisson:rate=0"}, "", problems, ["arrival"]).read("arrival", None, bad_rate)
    (problem,) = problems.items
    assert problem == 'arrival: poisson: field "rate" must be a number > 0'
    assert isinstance(problem, Problem) and problem.part == "arrival.rate"
    assert (
        flag_problem(problem, {"arrival.rate": "--rate"})
        == '--rate: poisson: field "rate" must be a number > 0'
    )
    assert (
        flag_problem(problem, {"arrival": "--arrival"})
        == '--arrival: poisson: field "rate" must be a number > 0'
    )


def test_an_unknown_decode_tier_points_to_the_custom_deadline_by_its_own_name() -> None:
    valid = "valid: strict, medium, relaxed"
    with pytest.raises(SettingsError) as caught:
        parse_params("capacity", {"target": "t", "slo": {"decode_tier": "nope"}}, JobLimits())
    assert caught.value.problems == [
        f'slo.decode_tier: unknown decode tier "nope"; {valid} (or give decode_deadline_s)'
    ]
    with pytest.raises(SettingsError) as flag:
        capacity_params(capacity_options("--decode-tier", "nope"))
    assert (
        str(flag.value) == f'--decode-tier: unknown decode tier "nope"; {valid} (or give --decode-deadline)'
    )


def capacity_options(*flags: str) -> dict[str, Any]:
    """``capacity``'s options as its command line gives them."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return merged_options(parser.parse_args(list(flags)))


def test_every_bad_flag_of_capacity_is_reported_at_once() -> None:
    with pytest.raises(SettingsError) as caught:
        read_capacity_options(
            capacity_options("--max-trials", "0", "--prefill-deadline", "0", "--gpus", "-1")
        )
    problems = str(caught.value).split("; ")
    assert [problem.partition(":")[0] for problem in problems] == [
        "--max-trials",
        "--prefill-deadline",
        "--gpus",
    ]


def test_every_bad_flag_of_bench_is_reported_at_once() -> None:
    flags = ["--percentile", "150", "--url", "ftp://h", "--max-prompt-tokens", "0", "--requests", "0"]
    with pytest.raises(SettingsError) as caught:
        read_bench_options(bench_options(*flags))
    assert str(caught.value) == (
        "--percentile: must be a number in (0, 100], got 150.0; "
        '--url: must be an http(s) URL like http://host:8000, got "ftp://h"; '
        "--max-prompt-tokens must be >= 1 token, got 0; --requests must be >= 1, got 0"
    )


def bench_options(*flags: str) -> dict[str, Any]:
    """``bench``'s raw flags as its command line gives them."""
    parser = argparse.ArgumentParser()
    add_bench_arguments(parser)
    return merged_options(parser.parse_args(list(flags)))
