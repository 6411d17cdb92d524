"""``python -m scripts.real_engines``: a second set-up finds the build cached; start, status and stop
run llama-server in the background on loopback and leave nothing behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts.real_engines import __main__ as commands
from scripts.real_engines import llamacpp
from scripts.real_engines.server import answers, live_members
from tests.real_engine import REAL_ENGINE

pytestmark = REAL_ENGINE


def test_a_second_setup_finds_the_build_and_does_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    folder = llamacpp.ensure()
    marker = (folder / "ready.json").stat()
    assert commands.main(["setup", "llamacpp"]) == 0
    assert (folder / "ready.json").stat().st_mtime_ns == marker.st_mtime_ns  # not rebuilt
    assert f"llamacpp: ready in {folder}" in capsys.readouterr().out
    assert llamacpp.server_binary().is_file() and llamacpp.model_file().is_file()


def test_setup_names_the_valid_engines(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        commands.main(["setup", "tgi"])
    assert exited.value.code == 2
    assert 'unknown engine "tgi"; valid: llamacpp, vllm' in capsys.readouterr().err


# In-process, the started server's Popen object goes out of scope while the server runs: intended.
@pytest.mark.filterwarnings("ignore:subprocess .* is still running:ResourceWarning")
def test_start_status_stop(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(commands, "_run_file", lambda name: tmp_path / f"{name}.json")
    assert commands.main(["start", "llamacpp"]) == 0
    started = json.loads((tmp_path / "llamacpp.json").read_text())
    try:
        assert answers(started["url"] + "/health")
        assert commands.main(["start", "llamacpp"]) == 1  # one at a time
        assert commands.main(["status"]) == 0
        assert f"llamacpp: built {llamacpp.recorded_version()}; {started['url']}" in capsys.readouterr().out
    finally:
        assert commands.main(["stop", "llamacpp"]) == 0
    assert live_members(started["pid"]) == []
    assert not answers(started["url"] + "/health")
    assert not (tmp_path / "llamacpp.json").exists()
    assert commands.main(["stop", "llamacpp"]) == 1
