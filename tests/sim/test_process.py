"""The simulator in a child process: stopped with the command, even when the command is interrupted
while the child starts (``__exit__`` never runs for an ``__enter__`` that raised); the default target's
simulator and its client on CPUs apart."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from exporter.sim.process import SimProcess, split_cpus, url_or_simulator


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


@pytest.mark.parametrize(
    ("cpus", "split"),
    [
        ({0}, (None, None)),
        ({0, 1}, ({1}, None)),
        ({2, 5, 7}, ({7}, {2, 5})),
        ({0, 1, 2, 3}, ({3}, {0, 1, 2})),
    ],
)
def test_the_simulator_gets_the_last_cpu_and_the_client_the_others_if_two_or_more(
    cpus: set[int], split: tuple[set[int] | None, set[int] | None]
) -> None:
    assert split_cpus(cpus) == split


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to keep them apart")
def test_the_default_target_runs_on_a_cpu_of_its_own() -> None:
    """The simulator runs on its own core (docs/bench.md says so): sharing every one with the client, its
    work makes the client's event loop late. The client keeps its CPUs where one alone would be left to
    it: held to one, it waits for whatever else runs there (a kernel thread, for milliseconds)."""
    own = os.sched_getaffinity(0)
    sim_cpus, client_cpus = split_cpus(own)
    before = set(_children(os.getpid()))  # another test's simulator may still be running
    with url_or_simulator(None, "tiny") as (url, simulated):
        assert simulated and url.startswith("http://127.0.0.1:")
        children = [pid for pid in _children(os.getpid()) if pid not in before]
        assert [os.sched_getaffinity(pid) for pid in children] == [sim_cpus]
        assert os.sched_getaffinity(0) == (client_cpus or own)
    assert os.sched_getaffinity(0) == own  # the command's CPUs back for whatever follows


def _children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (Linux's /proc)."""
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text(encoding="ascii")
    return [int(child) for child in text.split()]
