"""A one-shot command stopped by SIGTERM or SIGHUP (``timeout``, a cancelled CI job, a container stop)
leaves no process behind: its simulator child and its worker processes stop with it, as with Ctrl-C.
They once kept running, the workers still sending load to the target."""

from __future__ import annotations

import json
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


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_capacity_search_writes_what_it_measured(
    tmp_path: Path, signum: signal.Signals
) -> None:
    """Ctrl-C and SIGTERM once wrote nothing: six minutes of trials lost. The finished trials are
    written, with the bracket so far and state ``interrupted``."""
    out = tmp_path / "out"
    flags = ["--sim-preset", "tiny", "--prompt-tokens", "fixed:32", "--output-tokens", "fixed:8"]
    flags += ["--start", "4", "--requests-per-trial", "20", "--warmup-requests", "0", "--no-plots"]
    argv = [sys.executable, "-m", "exporter", "capacity", *flags, "--output", str(out)]
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        seen = []
        while not any(line.startswith("[") and "trial 2/" in line for line in seen[-1:]):
            line = process.stderr.readline()
            assert line, "".join(seen)  # ended before its second trial started
            seen.append(line)
        process.send_signal(signum)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signum
    assert "Traceback" not in err
    name = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    assert f"{name}: interrupted after 1 trial; what they measured is written (state interrupted)" in err
    result = json.loads((out / "capacity.json").read_text())
    assert result["state"] == "interrupted" and result["stopped_by"] == "interrupted"
    assert len(result["trials"]) == 1 and result["trials"][0]["load"] == 4
    assert result["capacity"] is None and result["lower_bound"] in (None, 4)


def test_a_search_interrupted_in_its_first_trial_leaves_no_folder(tmp_path: Path) -> None:
    """Nothing measured, nothing written: once an empty ``capacity-results/`` was left behind."""
    flags = ["--sim-preset", "tiny", "--prompt-tokens", "fixed:32", "--output-tokens", "fixed:8"]
    flags += ["--start", "1", "--requests-per-trial", "100", "--warmup-requests", "0", "--no-plots"]
    argv = [sys.executable, "-m", "exporter", "capacity", *flags]
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        assert process.stderr is not None
        seen = [""]
        while "trial 1/" not in seen[-1]:
            seen.append(process.stderr.readline())
            assert seen[-1], "".join(seen)  # ended before its first trial started
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130 and "capacity: interrupted" in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_an_interrupted_profile_writes_the_lengths_it_finished_beside_its_model(tmp_path: Path) -> None:
    """SIGTERM once wrote nothing. What was measured goes beside ``--output``, not in its place: a
    fit of part of the ladder is no model to set deadlines by."""
    output = tmp_path / "model.json"
    argv = [sys.executable, "-m", "exporter", "profile", "--sim-preset", "tiny", "--output", str(output)]
    argv += ["--lengths", "128,256,512,1024,2048,4096", "--repeats", "40"]
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        seen = [""]
        while "tokens: min TTFT" not in seen[-1]:  # the first length is done
            seen.append(process.stderr.readline())
            assert seen[-1], "".join(seen)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 128 + signal.SIGTERM and "Traceback" not in err
    kept = tmp_path / "model.interrupted.json"
    assert "SIGTERM: interrupted after " in err and f"wrote what they measured to {kept}" in err
    assert not output.exists()
    written = json.loads(kept.read_text())
    assert written["state"] == "interrupted" and [s["prompt_tokens"] for s in written["samples"]][:1] == [128]
