"""The simulator in a child process: a target on its own core for one-shot evaluations and benchmarks.

A client measuring a server that shares its event loop (and, on a small machine, its core) would time
its own work as the server's. ``SimProcess`` starts ``python -m exporter sim`` on a free loopback port,
waits for the line that says where it listens, and stops it on exit. ``url_or_simulator`` is what the
commands without a ``--url`` (``run``, ``bench``, ``capacity``, ``profile``) start instead of a target.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType

LISTENING = re.compile(r"on (http://\S+)")
START_TIMEOUT_S = 30.0
DEFAULT_PRESET = "llama-3.1-8b-h100"  # the model a command without a target simulates


class SimStartError(RuntimeError):
    """The simulator child process did not say where it listens (the message has its stderr)."""


class SimProcess:
    """``with SimProcess(["--sim-preset", "tiny"]) as sim: sim.url``; extra arguments go to ``sim``."""

    def __init__(
        self, arguments: Sequence[str] = (), host: str = "127.0.0.1", *, cpus: set[int] | None = None
    ) -> None:
        self.arguments = [*arguments, "--host", host, "--port", "0"]
        self.cpus = cpus  # pin the child to these CPUs (benchmarks keep server and client apart)
        self.process: subprocess.Popen[str] | None = None
        self.url = ""

    def __enter__(self) -> SimProcess:
        command = [sys.executable, "-m", "exporter", "sim", *self.arguments]
        # stderr goes to a file, not a pipe: a pipe nobody drains would block a chatty child.
        self.errors = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=self.errors, text=True, start_new_session=True
        )
        try:
            self.url = self._wait_for_address(self.process)
            if self.cpus:
                os.sched_setaffinity(self.process.pid, self.cpus)
        except BaseException:
            # Ctrl-C while the child starts: ``__exit__`` never runs for an ``__enter__`` that raised,
            # and the child, in a session of its own, would outlive the command (seen in 1 of 8 tries).
            self._stop()
            raise
        return self

    def _wait_for_address(self, process: subprocess.Popen[str]) -> str:
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_drain, args=(process, lines), daemon=True).start()
        try:
            match = LISTENING.search(lines.get(timeout=START_TIMEOUT_S))
        except queue.Empty:
            match = None
        if match is None:
            self._stop()
            self.errors.seek(0)
            reason = self.errors.read().strip() or "no address printed"
            raise SimStartError(f"the simulator did not start: {reason}")
        return match.group(1)

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self._stop()
        self.errors.close()

    def _stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _drain(process: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
    """Hand every stdout line to ``lines`` until the child exits, so its pipe never fills."""
    assert process.stdout is not None
    for line in process.stdout:
        lines.put(line)
    lines.put("")


def split_cpus(cpus: set[int]) -> tuple[set[int] | None, set[int] | None]:
    """(the simulator's CPUs, the client's; None: left to the scheduler): the last CPU for the
    simulator, the others for the client where they are two or more. A client held to one CPU waits for
    whatever else runs there: on a 2-core VM, the kernel's DAMON thread (``kdamond``, proactive
    reclaim) holds a CPU for 2-8 ms every 5 s, and a woken client pinned there stayed off the CPU that
    long with the other one idle, its reads of 7-25 streams merged. Left free, it wakes on the idle CPU
    (``bench/default_reliable.py``: exit 0 in 8 of 8 runs, none flagged, against 4 of 8 and 59 flagged
    pinned). The simulator keeps its CPU: a late simulator is a late server, which the client times
    truthfully."""
    if len(cpus) < 2:
        return None, None
    last = max(cpus)
    others = cpus - {last}
    return {last}, others if len(others) >= 2 else None


@contextmanager
def url_or_simulator(url: str | None, preset: str | None = None) -> Iterator[tuple[str, bool]]:
    """``(url, False)``, or with no ``url`` the simulator's in a child process and True (it is simulated);
    a simulator that does not start raises ``SimStartError``. The simulator runs on a CPU of its own and
    this process (the client, and the worker processes it starts meanwhile) on the others where they
    are two or more (``split_cpus``): sharing every CPU, the simulator's work would make the client's
    event loop late, and its stamps with it."""
    if url:
        yield url, False
        return
    own = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    sim_cpus, client_cpus = split_cpus(own)
    with SimProcess(["--sim-preset", preset or DEFAULT_PRESET], cpus=sim_cpus) as sim:
        if client_cpus:
            os.sched_setaffinity(0, client_cpus)
        try:
            yield sim.url, True
        finally:
            if client_cpus:
                os.sched_setaffinity(0, own)
