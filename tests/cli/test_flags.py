"""One spelling per concept across commands; the old spellings still work, with a one-line warning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from exporter.cli import _commands, build_parser
from exporter.cli.flags import merged_options
from exporter.settings.problems import SettingsError

PARSER = build_parser(_commands())


def parse(*argv: str) -> dict[str, Any]:
    return vars(PARSER.parse_args(list(argv)))


@pytest.mark.parametrize(
    ("old", "new", "key", "value"),
    [
        (
            ["bench", "--slo", "ttft:p99<=2"],
            ["bench", "--objective", "ttft:p99<=2"],
            "objective",
            ["ttft:p99<=2"],
        ),
        (["bench", "--fluid-percentile", "90"], ["bench", "--percentile", "90"], "percentile", 90.0),
        (["capacity", "--no-plot"], ["capacity", "--no-plots"], "plots", False),
        (["run", "--sim.preset", "tiny"], ["run", "--sim-preset", "tiny"], "sim_preset", "tiny"),
        (["run", "--sim.preset=tiny"], ["run", "--sim-preset=tiny"], "sim_preset", "tiny"),
        (["sim", "--preset", "tiny"], ["sim", "--sim-preset", "tiny"], "preset", "tiny"),
    ],
)
def test_an_old_spelling_reads_as_the_new_one_and_says_so(
    capsys: pytest.CaptureFixture[str], old: list[str], new: list[str], key: str, value: object
) -> None:
    assert parse(*new)[key] == value
    assert capsys.readouterr().err == ""
    assert parse(*old) == parse(*new)
    err = capsys.readouterr().err
    assert err.count("\n") == 1  # one line for the one use of the old spelling
    assert f"{old[1].split('=')[0]} is deprecated and will be removed; use {new[1].split('=')[0]}" in err


def test_old_and_new_spellings_of_a_repeatable_flag_add_up(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(
        "bench", "--objective", "ttft:p99<=2", "--slo", "e2e:p99<=30", "--objective", "tpot:p99<=0.1"
    )
    assert args["objective"] == ["ttft:p99<=2", "e2e:p99<=30", "tpot:p99<=0.1"]
    assert capsys.readouterr().err.count("deprecated") == 1


@pytest.mark.parametrize("command", ["run", "bench", "sim"])
def test_an_unknown_flag_prints_the_commands_usage(capsys: pytest.CaptureFixture[str], command: str) -> None:
    """The top-level usage names no flag of the command: the command's own says what it takes."""
    with pytest.raises(SystemExit) as exited:
        PARSER.parse_args([command, "--bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"usage: fluidity-exporter {command} [-h]")
    assert f"fluidity-exporter {command}: error: unrecognized arguments: --bogus" in err


def test_duration_help_says_how_it_meets_requests() -> None:
    text = " ".join(PARSER._subparsers._group_actions[0].choices["bench"].format_help().split())  # type: ignore[union-attr]
    assert (
        "--duration DURATION seconds of load: no request sent after it (with --requests: whichever ends first)"
        in text
    )


def test_old_spellings_are_hidden_from_help() -> None:
    text = PARSER._subparsers._group_actions[0].choices["bench"].format_help()  # type: ignore[union-attr]
    assert "--objective" in text and "--percentile" in text and "--no-plots" in text
    assert "--slo" not in text and "--fluid-percentile" not in text


def test_a_config_files_old_keys_still_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bench.yaml"
    config.write_text("slo: ['ttft:p99<=2']\nfluid-percentile: 90\n")
    options = merged_options(PARSER.parse_args(["bench", "--config", str(config)]))
    assert options["objective"] == ["ttft:p99<=2"] and options["percentile"] == 90
    assert capsys.readouterr().err.count("deprecated") == 2
    config.write_text("no_plot: true\n")
    assert merged_options(PARSER.parse_args(["capacity", "--config", str(config)]))["plots"] is False


def test_a_config_file_still_refuses_unknown_keys(tmp_path: Path) -> None:
    config = tmp_path / "bench.yaml"
    config.write_text("slo: ['ttft:p99<=2']\n")  # an old key of bench's: profile has no objectives
    with pytest.raises(SettingsError, match='unknown key "slo"'):
        merged_options(PARSER.parse_args(["profile", "--config", str(config)]))


@pytest.mark.parametrize("command", ["bench", "capacity", "profile"])
def test_no_flag_hides_a_config_files_key_behind_a_default(command: str) -> None:
    """A ``--config`` file's key fills a flag that was not given (None); a flag with a default of its own
    would always win over the file (``profile --repeats`` and ``--output`` did). Defaults belong to the
    settings' readers."""
    given = {key: value for key, value in parse(command).items() if key not in ("command", "config")}
    assert {key: value for key, value in given.items() if value is not None} == {}


def test_a_config_files_repeats_and_output_reach_a_profile(tmp_path: Path) -> None:
    config = tmp_path / "profile.yaml"
    config.write_text("repeats: 5\noutput: there.json\n")
    options = merged_options(PARSER.parse_args(["profile", "--config", str(config)]))
    assert (options["repeats"], options["output"]) == (5, "there.json")
    flags = merged_options(PARSER.parse_args(["profile", "--config", str(config), "--repeats", "2"]))
    assert flags["repeats"] == 2  # flags win
