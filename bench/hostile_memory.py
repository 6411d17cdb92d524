"""Peak memory of ``bench`` and of the daemon against a hostile target, beside a well-behaved one.

The target is ``tests/support/hostile.py`` (in a thread of this process): each mode answers with bytes
without end (an SSE event of endless ``data:`` lines, endless headers, one endless header, a stream
past its ``max_tokens``, a stream of chunks without a token, an endless body). The baseline is the same command against the simulator
(``--preset tiny``, a process of its own), from the same run. For each, a child process runs:

* ``bench``: 4 requests of 16 tokens, 4 at a time, ``--total-timeout`` (default 30 s): its wall time
  says whether it ended at a bound or at that timeout;
* ``daemon``: ``exporter run`` with one target probed every 2 s (and its ``/metrics`` scraped every
  5 s), for ``--seconds``.

Peak RSS is the child's ``ru_maxrss`` (``wait4``); a child whose RSS passes ``--kill-mb`` (default
1024: the shipped sidecar's memory limit) is killed there, as the OOM killer would, and shown as such.
``--checkout``: run the children on another checkout's code (the code before a change: ``/work/main``)::

    python bench/hostile_memory.py                        # this checkout
    python bench/hostile_memory.py --checkout /work/main  # before
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter.sim.process import SimProcess  # noqa: E402
from tests.support.hostile import MODEL, HostileServer  # noqa: E402
from tests.support.hostile import MODES as HOSTILE_MODES  # noqa: E402

# Every mode that costs memory; a redirect sends none of its bytes to be read.
MODES = tuple(mode for mode in HOSTILE_MODES if mode != "redirect")


@contextmanager
def hostile(mode: str) -> Iterator[str]:
    """The hostile server of ``mode`` on a loop of its own thread; yields its base URL."""
    loop = asyncio.new_event_loop()
    ready: list[str] = []
    server = HostileServer(mode)

    async def serve() -> None:
        async with server:
            ready.append(server.url)
            while not stop.is_set():
                await asyncio.sleep(0.05)

    stop = threading.Event()
    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    while not ready:
        time.sleep(0.01)
    try:
        yield ready[0]
    finally:
        stop.set()
        thread.join(5)


@contextmanager
def target(mode: str) -> Iterator[str]:
    if mode == "baseline":
        with SimProcess(["--preset", "tiny"]) as sim:
            yield sim.url
    else:
        with hostile(mode) as url:
            yield url


def run_child(command: list[str], checkout: Path, limit_s: float, kill_mb: float) -> tuple[float, float, str]:
    """Run ``command`` on ``checkout``'s code: (peak RSS MB, wall s, how it ended)."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    started = time.monotonic()
    # In the checkout: ``python -m`` puts the working directory first on the path, before PYTHONPATH.
    process = subprocess.Popen(
        command, env=env, cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    ended = "ran out"
    while True:
        pid, status, usage = os.wait4(process.pid, os.WNOHANG)
        if pid:
            process.returncode = os.waitstatus_to_exitcode(status)
            ended = ended if ended != "ran out" else f"exit {process.returncode}"
            return usage.ru_maxrss / 1024, time.monotonic() - started, ended
        if rss_mb(process.pid) > kill_mb:
            ended = f"killed at {kill_mb:.0f} MB"
            os.kill(process.pid, signal.SIGKILL)  # not Popen's: it would reap the child before wait4
        elif time.monotonic() - started > limit_s:
            os.kill(process.pid, signal.SIGTERM)  # the daemon's run is over (bench: over its limit)
        time.sleep(0.02)


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except FileNotFoundError:
        pass
    return 0.0


def model_of(mode: str) -> list[str]:
    """The ``--model`` flag: the hostile server's model; the simulator's first (by /v1/models)."""
    return [] if mode == "baseline" else ["--model", MODEL]


def bench_command(url: str, out: Path, total_timeout: float, model: list[str]) -> list[str]:
    return [
        sys.executable, "-m", "exporter", "bench", "--url", url, *model, "--api", "chat",
        "--no-calibrate", "--requests", "4", "--concurrency", "4", "--prompt-tokens", "fixed:16",
        "--output-tokens", "fixed:16", "--total-timeout", str(total_timeout), "--ttft-timeout", "20",
        "--idle-timeout", "20", "--output", str(out), "--force", "--no-plots", "--quiet",
    ]  # fmt: skip


def daemon_command(url: str, workdir: Path, model: list[str]) -> list[str]:
    config = workdir / "config.yaml"
    named = f" model: {MODEL}," if model else ""
    config.write_text(
        "targets:\n"
        f"  - {{name: h, url: '{url}',{named} api: chat,\n"
        f"     engine_metrics: {{url: '{url}/metrics', interval: 5s}}}}\n"
        "modules:\n"
        "  m:\n"
        "    workload: {prompt_tokens: 'fixed:16', output_tokens: 'fixed:16'}\n"
        "    requests_per_run: 1\n"
        "    schedule: {interval: 2s}\n"
    )
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return [
        sys.executable, "-m", "exporter", "run", f"--config.file={config}",
        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn",
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--checkout", type=Path, default=ROOT, help="whose code the children run")
    parser.add_argument("--seconds", type=float, default=20.0, help="how long each daemon runs")
    parser.add_argument("--total-timeout", type=float, default=30.0, help="bench's total timeout")
    parser.add_argument("--kill-mb", type=float, default=1024.0, help="kill a child past this RSS")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated hostile modes")
    parser.add_argument("--only", choices=("bench", "daemon"), help="run one of the two children")
    args = parser.parse_args()
    print(f"children on {args.checkout}; baseline: the simulator; kill at {args.kill_mb:.0f} MB")
    print(f"{'child':7} {'target':16} {'peak RSS MB':>12} {'x baseline':>10} {'wall s':>7}  ended")
    kinds = [args.only] if args.only else ["bench", "daemon"]
    for kind in kinds:
        base = 0.0
        for mode in ["baseline", *args.modes.split(",")]:
            with tempfile.TemporaryDirectory() as tmp, target(mode) as url:
                if kind == "bench":
                    command = bench_command(url, Path(tmp) / "out", args.total_timeout, model_of(mode))
                    limit = args.total_timeout + 60
                else:
                    command, limit = daemon_command(url, Path(tmp), model_of(mode)), args.seconds
                peak, wall, ended = run_child(command, args.checkout, limit, args.kill_mb)
            base = peak if mode == "baseline" else base
            ratio = peak / base if base else float("nan")
            print(f"{kind:7} {mode:16} {peak:12.0f} {ratio:10.2f} {wall:7.1f}  {ended}", flush=True)


if __name__ == "__main__":
    main()
