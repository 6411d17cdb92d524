"""A one-shot command stopped by SIGTERM or SIGHUP (``timeout``, a cancelled CI job, a container stop)
leaves no process behind: its simulator child and its worker processes stop with it, as with Ctrl-C.
They once kept running, the workers still sending load to the target."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.wait import wait_until


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table from /proc")
@pytest.mark.parametrize(
    ("command", "signum"),
    [
        (["capacity", "--sim-preset", "tiny", "--workers", "2"], signal.SIGTERM),
        (
            ["bench", "--sim-preset", "tiny", "--workers", "2", "--rate", "2", "--duration", "120"],
            signal.SIGHUP,
        ),
    ],
)
def test_a_terminated_command_takes_its_children_with_it(
    tmp_path: Path, command: list[str], signum: signal.Signals
) -> None:
    argv = [sys.executable, "-m", "exporter", *command, "--output", str(tmp_path / "out")]
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        # The simulator and both workers are up once there are three children.
        wait_until(lambda: len(children(process.pid)) >= 3, timeout=90, what="the simulator and 2 workers")
        kids = children(process.pid)
        time.sleep(1.0)  # load flowing
        process.send_signal(signum)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signum
    assert f"{signal.Signals(signum).name}: stopped at once, nothing written" in err
    assert "Traceback" not in err
    deadline = time.monotonic() + 20
    while any(alive(pid) for pid in kids) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [pid for pid in kids if alive(pid)]
    for pid in left:  # the test must not leave them behind either
        os.kill(pid, signal.SIGKILL)
    assert not left, f"children still running 20 s after the command ended: {left}"
