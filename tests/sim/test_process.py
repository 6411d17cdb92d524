"""The simulator in a child process: stopped with the command, even when the command is interrupted
while the child starts (``__exit__`` never runs for an ``__enter__`` that raised)."""

from __future__ import annotations

import subprocess

import pytest

from exporter.sim.process import SimProcess


def test_an_interrupt_while_the_child_starts_stops_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[subprocess.Popen[str]] = []

    def interrupted(self: SimProcess, process: subprocess.Popen[str]) -> str:
        started.append(process)
        raise KeyboardInterrupt  # Ctrl-C while waiting for the line that says where it listens

    monkeypatch.setattr(SimProcess, "_wait_for_address", interrupted)
    with pytest.raises(KeyboardInterrupt), SimProcess(["--sim-preset", "tiny"]):
        pytest.fail("the block must not run")
    assert len(started) == 1
    assert started[0].poll() is not None  # the child was stopped, not left to run in its own session
