"""The real engines' cache and server runner, without an engine: readiness markers, the build lock,
and start-up failures that name the log."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from scripts.real_engines.cache import (
    StepError,
    cache_root,
    ensure_built,
    fresh,
    is_ready,
    locked,
    mark_ready,
    read_ready,
    step,
)
from scripts.real_engines.server import EngineServer, EngineStartError, free_port


def test_cache_root_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FLUIDITY_ENGINES_CACHE", str(tmp_path / "engines"))
    assert cache_root() == tmp_path / "engines"
    monkeypatch.delenv("FLUIDITY_ENGINES_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "fluidity-exporter" / "engines"


def test_a_folder_is_built_only_once_its_marker_exists(tmp_path: Path) -> None:
    folder = tmp_path / "engine-1.0"
    fresh(folder)
    (folder / "half-built").write_text("x")
    assert not is_ready(folder)
    fresh(folder)  # an interrupted build is started over
    assert list(folder.iterdir()) == []
    mark_ready(folder, {"version": "1.0", "setup_seconds": 3})
    assert is_ready(folder) and read_ready(folder) == {"version": "1.0", "setup_seconds": 3}
    assert not (folder / "ready.json.tmp").exists()


def test_ensure_built_builds_once_and_starts_over_after_a_failed_build(tmp_path: Path) -> None:
    folder = tmp_path / "engine-1.0"
    calls: list[list[str]] = []

    def failing(target: Path) -> dict[str, str]:
        calls.append(sorted(p.name for p in target.iterdir()))
        (target / "partial").write_text("x")
        raise StepError("the compiler ran out of memory")

    def working(target: Path) -> dict[str, str]:
        calls.append(sorted(p.name for p in target.iterdir()))
        (target / "bin").write_text("x")
        return {"version": "1.0"}

    with pytest.raises(StepError):
        ensure_built(folder, failing)
    assert not is_ready(folder)
    assert ensure_built(folder, working) == folder
    assert ensure_built(folder, failing) == folder  # built: the builder is not called again
    assert calls == [[], []]  # each build started from an empty folder
    facts = read_ready(folder)
    assert facts["version"] == "1.0" and isinstance(facts["setup_seconds"], int)


def test_the_build_lock_makes_a_second_builder_wait(tmp_path: Path) -> None:
    folder = tmp_path / "engine-1.0"
    order: list[str] = []

    def second() -> None:
        with locked(folder):
            order.append("second")

    with locked(folder):
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.2)
        order.append("first done")
    thread.join(5)
    assert order == ["first done", "second"]


def test_a_failed_step_names_the_command_and_shows_its_output(tmp_path: Path) -> None:
    log = tmp_path / "setup.log"
    assert step("say hello", [sys.executable, "-c", "print('hello')"], log) >= 0
    with pytest.raises(StepError, match=r"(?s)break it failed \(exit 3\).*last lines.*broken here"):
        step("break it", [sys.executable, "-c", "print('broken here'); raise SystemExit(3)"], log)
    assert "hello" in log.read_text()


def test_a_server_that_dies_during_start_up_is_reported_with_its_log(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "print('model file not found'); raise SystemExit(2)"]
    server = EngineServer("fake", command, free_port(), tmp_path / "fake.log")
    with pytest.raises(
        EngineStartError, match=r"(?s)fake exited with 2 during start-up.*model file not found"
    ):
        server.start()
    assert server.process is None


def test_a_server_that_never_answers_is_stopped_after_the_limit(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import time; time.sleep(60)"]
    server = EngineServer("silent", command, free_port(), tmp_path / "silent.log", start_limit_s=1.0)
    started = time.monotonic()
    with pytest.raises(
        EngineStartError, match=r"silent did not answer http://127\.0\.0\.1:\d+/health within 1 s"
    ):
        server.start()
    assert time.monotonic() - started < 10  # SIGTERM ended it; no SIGKILL grace needed
    assert server.process is None
