"""Start and stop an engine's server on loopback, with its output in a log file.

``EngineServer`` starts the command in a session of its own (vLLM forks an engine-core process; stopping
the whole group leaves nothing behind), waits until the readiness URL answers 200 (or the process dies,
or the start-up limit passes, each with the log's last lines in the error), and stops it with SIGTERM,
then SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

POLL_S = 0.5
STOP_GRACE_S = 20.0


class EngineStartError(RuntimeError):
    """The engine exited or never became ready; the message carries its log's last lines."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log_tail(log: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of ``log`` ("" when it does not exist)."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "".join(text.splitlines(keepends=True)[-lines:])


def answers(url: str, timeout: float = 2.0) -> bool:
    """Whether GET ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def live_members(pgid: int) -> list[int]:
    """The processes of group ``pgid`` that are not zombies (Linux ``/proc``). A zombie is dead but
    still counts as a member until its parent reaps it, which a detached server's parent may never do."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while we looked
            continue
        fields = text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != "Z":
            live.append(int(stat.parent.name))
    return live


def _gone(pgid: int) -> bool:
    return not live_members(pgid)


def _wait_gone(pgid: int, timeout: float, reap: Callable[[], object]) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        reap()  # a zombie leader still counts as a member of its group until it is reaped
        if _gone(pgid):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)


def _reap_if_child(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def stop_group(pgid: int, reap: Callable[[], object] | None = None) -> None:
    """SIGTERM to process group ``pgid`` (a server started in a session of its own, with whatever it
    forked), SIGKILL to what is left after ``STOP_GRACE_S``. ``reap`` collects the leader when it is our
    child (``Popen.poll``; by default ``waitpid`` when it is our child, nothing otherwise)."""
    reaper = reap or (lambda: _reap_if_child(pgid))
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        if _wait_gone(pgid, STOP_GRACE_S, reaper):
            return


@dataclass
class EngineServer:
    """One engine process on 127.0.0.1:``port``; use as a context manager or call start/stop."""

    name: str
    command: Sequence[str]
    port: int
    log: Path
    ready_path: str = "/health"
    start_limit_s: float = 300.0
    env: Mapping[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    startup_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> EngineServer:
        started = time.monotonic()
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                list(self.command),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        try:
            self._wait_ready(started)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - started
        return self

    def _wait_ready(self, started: float) -> None:
        assert self.process is not None
        url = self.base_url + self.ready_path
        while not answers(url):
            if self.process.poll() is not None:
                raise EngineStartError(
                    f"{self.name} exited with {self.process.returncode} during start-up; "
                    f"last lines of {self.log}:\n{log_tail(self.log)}"
                )
            if time.monotonic() - started > self.start_limit_s:
                raise EngineStartError(
                    f"{self.name} did not answer {url} within {self.start_limit_s:g} s; "
                    f"last lines of {self.log}:\n{log_tail(self.log)}"
                )
            time.sleep(POLL_S)

    def stop(self) -> None:
        """Stop the whole process group (see ``stop_group``)."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            stop_group(process.pid, process.poll)
            process.wait()  # the group is gone; reap the leader if it was only a zombie

    def __enter__(self) -> EngineServer:
        return self.start()

    def __exit__(
        self, _type: type[BaseException] | None, _exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        self.stop()
