"""Is the default ``bench`` reliable? Runs ``fluidity-exporter bench`` as a user would (the embedded
simulator, every default) several times, and counts per run its exit code and the requests it flagged;
with ``--turns``, also the stalls of its loop that flag them, and their cause.

A stall is a stretch in which the client's own gauges of its lateness saw 3 ms
(``saturation.LAG_LIMIT_S``) or more: a read of the sockets that came that late
(``socket_reads.LateReads``: a paced read after it was due, or one woken by readability whose bytes
had waited), or a sample of the lag monitor's own timer (``saturation.LagMonitor``). *busy*: the loop's
callbacks used at least half of the stall in CPU (the client's own work held the loop); *elsewhere*:
they did not (the process was off the CPU, or the bytes were stamped on arrival but became readable
late: a loaded machine defers loopback's softirq). Printed with them: the most CPU the callbacks used
in one stall, and the most batches of kept reads (``stream_reader.py``) decoded in one. To count them the
command runs on a ``uvloop.Loop`` subclass that times every callback (~1 us each).

Usage, on a quiet machine (the goal of issue 36: exit 0 in 5 of 5)::

    python bench/default_reliable.py --runs 5

and A/B against another checkout (its root on ``PYTHONPATH``), the arms alternating so a machine that
gets busier moves both alike (``--keep DIR`` keeps each run's report and timings)::

    python bench/default_reliable.py --runs 6 --turns --against /path/to/other/checkout

and with ``--trace`` (root, and tracefs at ``/sys/kernel/tracing``: ``mount -t tracefs nodev
/sys/kernel/tracing``) each stall is put down to the task that held the CPU the client was woken on:
the scheduler's switches are traced on the clock the stalls are stamped with, and the task switched
out for the client as a stall ended is named (``swapper``: the CPU was idle and woke late)::

    python bench/default_reliable.py --runs 3 --trace

About 40 s a run. Measured when the batches were first spread over turns (``flushes.py``), against the
commit before, interleaved, on this project's 2-core VM shared with ~7 agents (load 7-13), 7 runs each
and the stalls then counted from the paced reads alone: every run of both flagged all 100 requests
(the stalls nearly all *elsewhere*); the most batches decoded in one stall 9-24 before (median 16),
0-6 after (median 1); the most callback CPU in one 4.1 -> 1.5 ms (medians). Under ``chrt -f 50`` (the
client and simulator ahead of the other load: nearer a quiet machine), two rounds of 6 runs each:
exit 0 in 10 of 12 before and 11 of 12 after (8 and 14 requests flagged); every failure on either side
came from stalls in which the callbacks used under 1 ms of CPU and decoded no batch (the process off
the CPU, or the bytes late in the kernel), which no change to the decoding removes: a quiet machine's
5 runs are still the test.

On a quiet 2-core VM (load 0.0-0.4, no CPU steal in ``/proc/stat``), interleaved, 8 runs each: exit 0
in 4 of 8 (51 requests flagged) with numpy's OpenBLAS worker thread, 7 of 8 (5 flagged) with it held to
one thread (``exporter/__init__.py``); a second round of 6, 4 of 6 (37). The failures left each come
from one or two stalls of 4-5 ms in which the process was off the CPU (*elsewhere*, under 0.5 ms of
callback CPU): one merges the reads of 7-25 streams whose tokens come 6 ms apart. Tried and not kept:
the simulator on the first CPU instead of the last (4 of 6 against 5 of 6), a ``SCHED_IDLE`` spinner
on the client's core so its vCPU never halts (stalls 18 -> 5 in 8 runs, failures no fewer: 4 of 8),
streams under 8 ms read unpaced (5 of 6 against 4 of 6: within the noise of six runs).

``--trace`` then named what held the CPU in four of five stalls of three runs: ``kdamond.0``, DAMON's
proactive reclaim (2-8 ms on a CPU every 5.12 s), on the one CPU the client was pinned to, with the
other idle; the fifth was the idle CPU woken late. With the client left free (the simulator still on
the last CPU: ``split_cpus``), interleaved, 8 runs each: exit 0 in 8 of 8 (none flagged, 3 stalls)
against 4 of 8 pinned (59 flagged, 19 stalls).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

STALL_S = 0.003  # saturation.LAG_LIMIT_S, not imported: the child runs either arm's code
BUSY_SHARE = 0.5
TRACEFS = Path("/sys/kernel/tracing")
SWITCH = re.compile(r" ([\d.]+): sched_switch: prev_comm=(.+?) prev_pid=\d+ .* next_pid=(\d+) ")


def child(out: Path, argv: list[str]) -> int:
    """Run the CLI with every loop callback timed; write what was timed to ``out``."""
    import uvloop

    from exporter.probe import loop as event_loop
    from exporter.probe import socket_reads

    try:
        from exporter.probe import stream_reader as reader
        from exporter.streams import saturation
    except ImportError:  # an arm from before the decoder left exporter.probe
        from exporter.probe import (
            reader,  # type: ignore[attr-defined, no-redef]
            saturation,  # type: ignore[attr-defined, no-redef]
        )

    clock, cpu = time.perf_counter, time.thread_time
    callbacks: list[tuple[float, float, float]] = []  # (start, wall, cpu)
    late: list[tuple[float, float]] = []  # (due, came) of each read or lag sample 3 ms late or more
    flushes: list[float] = []  # when each batch of kept reads was decoded
    named: list[tuple[float, float, str]] = []  # (start, wall, name) of the callbacks that ran long

    def timed(callback: Any) -> Any:
        def run(*args: Any) -> Any:
            start, cpu0 = clock(), cpu()
            try:
                return callback(*args)
            finally:
                wall = clock() - start
                callbacks.append((start, wall, cpu() - cpu0))
                if wall >= STALL_S / 3:  # what ran long, by name
                    named.append((start, wall, _name(callback)))

        return run

    class TimedLoop(uvloop.Loop):
        def call_soon(self, callback: Any, *args: Any, context: Any = None) -> Any:  # type: ignore[override]
            return super().call_soon(timed(callback), *args, context=context)

        def call_at(self, when: float, callback: Any, *args: Any, context: Any = None) -> Any:  # type: ignore[override]
            return super().call_at(when, timed(callback), *args, context=context)

        def call_later(self, delay: float, callback: Any, *args: Any, context: Any = None) -> Any:  # type: ignore[override]
            return super().call_later(delay, timed(callback), *args, context=context)

        def add_reader(self, fd: Any, callback: Any, *args: Any) -> Any:  # type: ignore[override]
            return super().add_reader(fd, timed(callback), *args)

    note, lag_tick = socket_reads.LateReads.note, saturation.LagMonitor._tick
    flush_kept = reader.StreamReader._flush_kept

    def noted_late(self: Any, now: float, late_by: float) -> None:  # the reads' lateness, paced or woken
        if late_by >= STALL_S:
            late.append((now - late_by, now))
        note(self, now, late_by)

    def noted_lag(self: Any, loop: Any) -> None:  # the lag monitor's own timer (the reads unpaced)
        now = clock()
        if now - self._expected >= STALL_S:
            late.append((self._expected, now))
        lag_tick(self, loop)

    def noted_flush(self: Any) -> None:
        flushes.append(clock())
        flush_kept(self)

    socket_reads.LateReads.note = noted_late  # type: ignore[method-assign]
    saturation.LagMonitor._tick = noted_lag  # type: ignore[method-assign]
    reader.StreamReader._flush_kept = noted_flush  # type: ignore[method-assign]
    event_loop.loop_factory = lambda name=None: TimedLoop
    from exporter.cli import main

    try:
        return main(argv)
    finally:
        out.write_text(json.dumps({"callbacks": callbacks, "late": late, "flushes": flushes, "named": named}))


def _name(callback: Any) -> str:
    owner = getattr(callback, "__self__", None)
    if owner is not None and hasattr(owner, "get_coro"):  # a task's step: its coroutine says more
        return f"task {owner.get_coro().__qualname__}"
    return str(getattr(callback, "__qualname__", None) or getattr(callback, "func", callback))


def stalls(timed: dict[str, Any]) -> dict[str, float]:
    """The run's stalls by cause, the most CPU its callbacks used in one, and the most batches of kept
    reads decoded in one (``timed``: ``child``'s)."""
    callbacks = sorted(timed["callbacks"])
    starts, flushes = [start for start, _, _ in callbacks], sorted(timed["flushes"])
    busy = elsewhere = most_batches = 0
    most_cpu = 0.0
    for due, came in _merged(timed["late"]):
        first, end = bisect.bisect_left(starts, due), bisect.bisect_left(starts, came)
        if first and callbacks[first - 1][0] + callbacks[first - 1][1] > due:  # one running at the due time
            first -= 1
        used = sum(cpu for _, _, cpu in callbacks[first:end])
        busy += used >= BUSY_SHARE * (came - due)
        elsewhere += used < BUSY_SHARE * (came - due)
        most_cpu = max(most_cpu, used)
        most_batches = max(most_batches, bisect.bisect_left(flushes, came) - bisect.bisect_left(flushes, due))
    return {"busy": busy, "elsewhere": elsewhere, "most_cpu_ms": most_cpu * 1e3, "most_batches": most_batches}


def _merged(windows: list[list[float]]) -> list[tuple[float, float]]:
    """Late windows that overlap (one stall seen by the reads and by the lag monitor) as one."""
    merged: list[tuple[float, float]] = []
    for due, came in sorted(windows):
        if merged and due <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], came))
        else:
            merged.append((due, came))
    return merged


def one_run(
    root: Path, turns: bool, keep: Path | None = None, trace: bool = False
) -> tuple[dict[str, float], Counter[str]]:
    """The default bench from the checkout at ``root``: exit code, flagged requests and stalls; with
    ``trace``, what held the client's CPU in each stall."""
    with tempfile.TemporaryDirectory() as out:
        report, timed = Path(out) / "report", Path(out) / "timed.json"
        argv = ["bench", "--quiet", "--no-plots", "--output", str(report), "--force"]
        command = [sys.executable, "-m", "exporter", *argv]
        if turns or trace:
            command = [sys.executable, str(Path(__file__).resolve()), "--child", str(timed), "--", *argv]
        env = {**os.environ, "PYTHONPATH": str(root)}
        if trace:
            start_trace()
        with subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.DEVNULL) as child_process:
            code = child_process.wait()
        summary = json.loads((report / "summary.json").read_text(encoding="utf-8"))
        if keep is not None:  # the run's report and timings, for a closer look
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copytree(out, keep / f"{root.name}-{time.strftime('%H%M%S')}")
        figures: dict[str, float] = {"exit": code, "flagged": summary["requests"]["unreliable"]}
        held: Counter[str] = Counter()
        if turns or trace:
            timings = json.loads(timed.read_text(encoding="utf-8"))
            figures |= stalls(timings)
        if trace:
            held = holders(stop_trace(), _merged(timings["late"]), child_process.pid)
    return figures, held


def start_trace() -> None:
    """Trace the scheduler's switches and wake-ups from now, on CLOCK_MONOTONIC (``perf_counter``'s)."""
    (TRACEFS / "tracing_on").write_text("0")
    for name, value in (("trace_clock", "mono"), ("buffer_size_kb", "65536"), ("trace", "")):
        (TRACEFS / name).write_text(value)
    (TRACEFS / "set_event").write_text("sched:sched_switch sched:sched_waking")
    (TRACEFS / "tracing_on").write_text("1")


def stop_trace() -> str:
    """What was traced since ``start_trace``; tracing off."""
    (TRACEFS / "tracing_on").write_text("0")
    return (TRACEFS / "trace").read_text(encoding="utf-8", errors="replace")


def holders(trace: str, windows: list[tuple[float, float]], pid: int) -> Counter[str]:
    """For each stall, the task the client's thread ``pid`` was switched in for when it ended: what held
    the CPU it was woken on (``swapper``: none, the CPU was idle and woke late); ``unseen`` where the
    trace shows no switch to the client within 1 ms of the stall's end."""
    switches_in = [
        (float(m.group(1)), m.group(2).split("/")[0])
        for m in SWITCH.finditer(trace)
        if int(m.group(3)) == pid
    ]
    times = [at for at, _ in switches_in]
    held: Counter[str] = Counter()
    for due, came in windows:
        first = bisect.bisect_left(times, due)
        ending = [name for at, name in switches_in[first : bisect.bisect_right(times, came + 1e-3)]]
        held[ending[-1] if ending else "unseen"] += 1
    return held


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs (per arm with --against)")
    parser.add_argument("--against", type=Path, help="another checkout's root: run it too, alternating")
    parser.add_argument("--turns", action="store_true", help="count stalls by cause (a timed loop)")
    parser.add_argument("--trace", action="store_true", help="name what held the client's CPU (root)")
    parser.add_argument("--keep", type=Path, help="copy each run's report (and timings) under this folder")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args()
    if args.child:
        sys.exit(child(args.child, rest[1:] if rest[:1] == ["--"] else rest))
    here = Path(__file__).resolve().parent.parent
    arms = {"this": here} if args.against is None else {"other": args.against.resolve(), "this": here}
    runs: dict[str, list[dict[str, float]]] = {arm: [] for arm in arms}
    held: dict[str, Counter[str]] = {arm: Counter() for arm in arms}
    for rep in range(args.runs):
        for arm in list(arms) if rep % 2 == 0 else list(arms)[::-1]:
            load = os.getloadavg()[0]
            figures, run_held = one_run(arms[arm], args.turns, args.keep, args.trace)
            runs[arm].append(figures)
            held[arm] += run_held
            shown = "  ".join(f"{key} {value:g}" for key, value in figures.items())
            print(f"{arm:<6} run {rep + 1}: {shown}  load {load:.1f}{_held(run_held)}", flush=True)
    for arm, arm_runs in runs.items():
        passed = sum(run["exit"] == 0 for run in arm_runs)
        keys = list(arm_runs[0])
        medians = "  ".join(f"{key} {statistics.median(r[key] for r in arm_runs):g}" for key in keys)
        totals = "  ".join(f"{key} {sum(r[key] for r in arm_runs):g}" for key in keys if key != "exit")
        print(
            f"{arm:<6} exit 0 in {passed} of {len(arm_runs)}; median {medians}; total {totals}{_held(held[arm])}"
        )


def _held(held: Counter[str]) -> str:
    return ("  held by " + ", ".join(f"{name} {n}" for name, n in held.most_common())) if held else ""


if __name__ == "__main__":
    main()
