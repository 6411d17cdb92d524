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


@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_no_file_can_be_made_in_is_refused_before_any_load(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """/proc takes no new file even from root, whom a permission check lets through: a file is made
    and dropped there first (else the whole load ran, then a FileNotFoundError)."""
    output = Path("/proc") / ("prefill.json" if command == "profile" else "fluidity-run")
    assert main([command, "--url", _unreachable(), "--output", str(output)]) == 2
    err = capsys.readouterr().err
    assert f"fluidity-exporter {command}: error: cannot write {output}" in err and "Traceback" not in err


def test_a_profile_output_that_is_a_folder_is_refused_even_forced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--force replaces an earlier result, not a folder (it ran the profile, then IsADirectoryError)."""
    assert main(["profile", "--url", _unreachable(), "--output", str(tmp_path), "--force"]) == 2
    err = capsys.readouterr().err
    assert f"cannot write {tmp_path}: it is a folder; --output names the file to write" in err


@pytest.mark.parametrize(
    ("command", "folder"), [("bench", "bench-results"), ("capacity", "capacity-results")]
)
def test_runs_in_one_second_get_folders_of_their_own_and_a_refused_one_leaves_none(
    command: str, folder: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs in one second wrote into one folder; a run refused before its load
    leaves no empty folder behind."""
    from exporter.report.bench_report import timestamped

    monkeypatch.chdir(tmp_path)
    first, second = timestamped(folder), timestamped(folder)
    assert first != second and first.is_dir() and second.is_dir()
    assert second.name in (f"{first.name}-2", second.name[:16])  # -2 in the same second, else the next
    first.rmdir()
    second.rmdir()
    # refused after its folder was made, before any trial or request: no prompt fits the context
    flags = ["--sim-preset", "tiny", "--prompt-tokens", "fixed:100000", "--output-tokens", "fixed:8"]
    assert main([command, *flags]) == 2
    assert main([command, "--url", _unreachable()]) == 1  # the target down: nothing written either
    assert not (tmp_path / folder).exists()  # nor the parent it made (an empty capacity-results/)
