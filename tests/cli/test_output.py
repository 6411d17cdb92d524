"""Where ``--output`` cannot take a result, ``bench``, ``capacity`` and ``profile`` say so and exit 2
before sending any load (they ran the whole load, then died with a traceback)."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.cli import main
from tests.support.net import free_port

COMMANDS = ["bench", "capacity", "profile"]


def _unreachable() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nobody listens: a command that sent load would fail with 1


@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_under_a_file_is_refused_before_any_load(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder\n")
    output = blocker / "results" / ("prefill.json" if command == "profile" else "run")
    assert main([command, "--url", _unreachable(), "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert f"fluidity-exporter {command}: error: cannot write {output}" in err
    assert f"{blocker} is not a folder; choose another --output" in err
    assert "Traceback" not in err


def test_a_profile_written_into_folders_not_yet_made_creates_them(tmp_path: Path) -> None:
    """The check lets through a path whose folders can be made; the writer then makes them."""
    output = tmp_path / "new" / "deeper" / "prefill.json"
    flags = ["--sim-preset", "tiny", "--lengths", "32,64", "--repeats", "1", "--no-calibrate"]
    code = main(["profile", *flags, "--output", str(output)])
    assert code == 0 and output.exists()
