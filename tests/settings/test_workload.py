"""The workload and the arrival: one reader each (``read_workload``, ``read_arrival``) for the daemon
config and the flags, so the same bad value fails with the same message, under its path or its flag."""

from __future__ import annotations

import argparse
import json
from typing import Any

import pytest

from exporter.cli.bench import add_arguments
from exporter.cli.flags import merged_options
from exporter.load.config_workloads import workload_for
from exporter.load.workload_options import build_workload
from exporter.load.workloads import Workload
from exporter.settings import SettingsError, parse_config
from exporter.settings.bench_options import BenchOptions, read_bench_options
from exporter.settings.lengths import Fixed, LogNormal

TARGET = "targets: [{name: t, url: 'http://127.0.0.1:1', modules: [m]}]\n"
PRESETS = "sharegpt, lmsys, mooncake, azure-code, arxiv-summarization, bwb"
LENGTHS = "empirical, fixed, lognormal, normal, uniform, zipf"


def config_problems(module: dict[str, Any]) -> list[str]:
    with pytest.raises(SettingsError) as caught:
        parse_config(TARGET + "modules: " + json.dumps({"m": module}) + "\n", environ={})
    return caught.value.problems


def bench_options(*flags: str) -> BenchOptions:
    """``bench``'s options as its command line gives them."""
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return read_bench_options(merged_options(parser.parse_args(list(flags))))


def workload_of(options: BenchOptions, simulated: bool = False) -> Workload:
    return build_workload(options.workload, options.target.settings.api, simulated)


def flag_problem(*flags: str) -> str:
    with pytest.raises(SettingsError) as caught:
        workload_of(bench_options(*flags), simulated=True)
    return str(caught.value)


# (the module's mapping, the flags, the config path, the flag, the message both give)
SAME_MESSAGE = {
    "unknown preset": (
        {"workload": "chatt"},
        ["--workload", "chatt"],
        "workload",
        "--workload",
        f'unknown workload preset "chatt"; valid: {PRESETS}',
    ),
    "unknown length distribution": (
        {"workload": {"prompt_tokens": "gauss:mean=3", "output_tokens": 8}},
        ["--prompt-tokens", "gauss:mean=3"],
        "workload.prompt_tokens",
        "--prompt-tokens",
        f'unknown length distribution "gauss"; valid: {LENGTHS}',
    ),
    "bad turns": (
        {"workload": {"preset": "lmsys", "turns": "zero"}},
        ["--workload", "lmsys", "--turns", "zero"],
        "workload.turns",
        "--turns",
        f'unknown length distribution "zero"; valid: {LENGTHS}',
    ),
    "bad think time": (
        {"workload": {"preset": "lmsys", "turns": 3, "think_time": "gamma:k=1"}},
        ["--workload", "lmsys", "--turns", "3", "--think-time", "gamma:k=1"],
        "workload.think_time",
        "--think-time",
        'unknown think-time distribution "gamma"; valid: fixed, uniform, exponential, lognormal',
    ),
    "response format without a type": (
        {"workload": {"preset": "lmsys", "response_format": {"schema": {}}}},
        ["--workload", "lmsys", "--response-format", '{"schema": {}}'],
        "workload.response_format",
        "--response-format",
        'must be a response_format object with a "type", e.g. {type: json_schema, json_schema: {...}}, '
        "got a mapping",
    ),
    "unknown arrival process": (
        {"arrival": "burst:rate=2"},
        ["--arrival", "burst", "--rate", "2"],
        "arrival",
        "--arrival",
        'unknown arrival process "burst"; valid: constant, gamma, poisson',
    ),
    "arrival rate of 0": (
        {"arrival": {"kind": "poisson", "rate": 0}},
        ["--rate", "0"],
        "arrival",
        "--rate",
        'poisson: field "rate" must be a number > 0 (requests per second), got 0.0',
    ),
    "negative gamma shape": (
        {"arrival": "gamma:rate=2,shape=-1"},
        ["--arrival", "gamma", "--rate", "2", "--burstiness", "-1"],
        "arrival",
        "--burstiness",
        'gamma: field "shape" must be a number > 0 (1 = Poisson), got -1.0',
    ),
}


@pytest.mark.parametrize("name", list(SAME_MESSAGE))
def test_a_bad_workload_or_arrival_has_one_message_in_yaml_and_flags(name: str) -> None:
    module, flags, path, flag, message = SAME_MESSAGE[name]
    assert config_problems(module) == [f"modules.m.{path}: {message}"]
    assert flag_problem(*flags) == f"{flag}: {message}"


# Problems of several settings together: the message names each setting, by its key or by its flag.
NAMED_SETTINGS = {
    "tool calls in conversations": (
        {"workload": {"preset": "lmsys", "turns": 3, "tool_calls": True}},
        ["--workload", "lmsys", "--turns", "3", "--tool-calls"],
        "modules.m.workload: tool_calls and turns above 1 exclude each other (a conversation would need "
        "tool results)",
        "--tool-calls and --turns above 1 exclude each other (a conversation would need tool results)",
    ),
    "tool calls with a preset of sessions": (
        {"workload": {"preset": "mooncake", "tool_calls": True}},
        ["--workload", "mooncake", "--tool-calls"],
        "modules.m.workload: tool_calls and turns above 1 exclude each other (a conversation would need "
        "tool results)",
        "--tool-calls and --turns above 1 exclude each other (a conversation would need tool results)",
    ),
    "a preset and lengths": (
        {"workload": {"preset": "lmsys", "prompt_tokens": 100}},
        ["--workload", "lmsys", "--prompt-tokens", "100"],
        "modules.m.workload: give one of preset, trace (with format) or prompt_tokens/output_tokens",
        "give one of --workload or --prompt-tokens/--output-tokens",  # the flags replay traces elsewhere
    ),
    "open and closed loop": (
        {"arrival": "poisson:rate=2", "concurrency": 2},
        ["--rate", "2", "--concurrency", "2"],
        "modules.m: give either arrival (open loop) or concurrency (closed loop), not both",
        "give either --arrival/--rate (open loop) or --concurrency (closed loop), not both",
    ),
}


@pytest.mark.parametrize("name", list(NAMED_SETTINGS))
def test_a_problem_of_several_settings_names_them_as_keys_or_flags(name: str) -> None:
    module, flags, from_config, from_flags = NAMED_SETTINGS[name]
    assert config_problems(module) == [from_config]
    assert flag_problem(*flags) == from_flags


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--arrival", "trace"], "--arrival trace: needs --trace (the trace whose times it replays)"),
        (["--arrival", "gamma", "--concurrency", "2"], "give either --arrival/--rate (open loop)"),
        (["--api", "completions", "--tool-calls"], "--tool-calls: needs --api chat or responses"),
        (["--turns", "trace", "--tool-calls"], "--tool-calls and --turns above 1 exclude each other"),
        # Each once ignored without a word: one turn per session, and a Poisson or constant process.
        (
            ["--turns", "trace"],
            "--turns trace: needs --trace (the conversation trace whose turns it replays)",
        ),
        (
            ["--arrival", "constant", "--burstiness", "0.5"],
            "--burstiness: only --arrival gamma has a shape, not constant; drop one of them",
        ),
        (["--burstiness", "0.5"], "--burstiness: only --arrival gamma has a shape, not poisson"),
        (["--trace-format", "sharegpt"], "--trace-format: needs --trace (the file whose format it names)"),
        # Sent at the trace's own times, the rate and the concurrency were ignored without a word.
        (
            ["--trace", "t.jsonl", "--trace-format", "sharegpt", "--arrival", "trace", "--concurrency", "4"],
            "--arrival trace sends each request at the trace's own time: drop --concurrency, or drop",
        ),
        # 0 was read as "not given": the preset's own filter ran, and the header said so.
        (["--max-output-tokens", "0"], "--max-output-tokens must be >= 1 token, got 0"),
    ],
)
def test_what_only_flags_can_get_wrong_names_the_flags(flags: list[str], message: str) -> None:
    assert message in flag_problem(*flags)


def test_flags_and_config_read_the_same_workload() -> None:
    config = parse_config(
        TARGET + "modules: {m: {workload: {prompt_tokens: 'fixed:200', output_tokens: 8, turns: 3, "
        "think_time: 'fixed:2'}, arrival: 'gamma:rate=3,shape=0.5'}}\n",
        environ={},
    )
    module = config.modules["m"]
    from_config = workload_for(module, config.targets[0])
    options = bench_options(
        *["--prompt-tokens", "fixed:200", "--output-tokens", "8", "--turns", "3", "--think-time", "fixed:2"],
        *["--arrival", "gamma", "--rate", "3", "--burstiness", "0.5"],
    )
    from_flags = workload_of(options)
    assert (from_flags.lengths, from_flags.turns, from_flags.think_time) == (
        from_config.lengths,
        from_config.turns,
        from_config.think_time,
    )
    assert options.load.arrival == module.arrival


def test_the_defaults_are_each_readers_own() -> None:
    """A probe's default lengths vary, a run's custom length given alone leaves the other fixed."""
    module = parse_config(TARGET + "modules: {m: {}}\n", environ={}).modules["m"]
    assert (module.workload.prompt_tokens, module.workload.output_tokens) == (LogNormal(512, 0.5), Fixed(128))
    workload = workload_of(bench_options("--output-tokens", "8"))
    assert workload.lengths.prompt == Fixed(512)  # type: ignore[attr-defined]
    assert workload_of(bench_options()).name == "sharegpt"
    assert bench_options("--concurrency", "2").load.arrival is None
