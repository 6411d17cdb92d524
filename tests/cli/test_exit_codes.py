"""A usage error exits 2 for every command, and docs/cli.md's exit-code text says so (it said
``check-config`` and ``run`` exit 0 or 1, while ``run --bogus`` and a bare ``check-config`` exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.cli import main

CLI_DOCS = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
COMMANDS = ("run", "bench", "capacity", "profile", "check-config", "demo", "sim", "shard")


@pytest.mark.parametrize("command", COMMANDS)
def test_an_unknown_flag_exits_2(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main([command, "--bogus"])
    assert caught.value.code == 2
    assert "error: " in capsys.readouterr().err


def test_a_missing_argument_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["check-config"])
    assert caught.value.code == 2
    assert "the following arguments are required: FILE" in capsys.readouterr().err


def test_the_docs_say_usage_errors_exit_2_for_every_command() -> None:
    text = " ".join(CLI_DOCS.read_text(encoding="utf-8").split())
    assert "A usage error (an unknown or malformed flag, a missing argument" in text
    assert "exits 2 for every command" in text
    assert "`check-config` and `run` exit 0 or 1." not in text


def test_a_bad_value_exits_2_before_anything_starts(capsys: pytest.CaptureFixture[str]) -> None:
    """``run --sim-preset bogus`` started the child, which refused it (exit 1); ``demo --requests 0``
    exited 1 with a bare message."""
    with pytest.raises(SystemExit) as caught:
        main(["run", "--sim-preset", "bogus"])
    assert caught.value.code == 2
    assert (
        "--sim-preset: invalid choice: 'bogus' (choose from 'llama-3.1-70b-4xh100'" in capsys.readouterr().err
    )
    assert main(["demo", "--requests", "0"]) == 2
    assert "fluidity-exporter demo: error: --requests must be >= 1 and --rate > 0, got 0 and 10" in (
        capsys.readouterr().err
    )
