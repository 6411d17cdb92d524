"""Benchmark of the simulator's emission: lateness of real SSE writes and tokens/s on one core.

Runs ``fluidity-exporter sim`` in a child process pinned to CPU 0 (``record_lateness: true``) and drives it
from this process (pinned to CPU 1 when there is one) over loopback with raw sockets that only count
bytes, so the client costs little. For each scenario the server reports, for every SSE write, actual
write time minus intended time; this prints p50/p99 at 10, 100 and 500 concurrent streams, with the
10-stream run as the same-run floor (this VM's own wake-up jitter), then throughput when saturated.

Scenarios:

* ``scripted``: independent streams (scripted mode), phases spread evenly over one inter-token gap, as
  streams started at different times are;
* ``engine``: the ``llama-3.1-8b-h100`` engine with every stream in one batch: each step's tokens are all
  due at the same instant, so their writes queue behind each other (the cost of a batch, reported apart);
* ``throughput``: scripted streams with 1 ms gaps, far more than one core can write: tokens written per
  second of wall time and per CPU-second of the server process.

Usage: ``python bench/sim_bench.py [--quick]`` (about 60-100 s: three rounds; ``--quick``: one round).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from exporter.sim.process import SimProcess

# The 8B-on-H100 preset gives the engine scenario a realistic step time (~8 ms at 100 streams, ~15 ms at
# 500); ``tiny`` steps (2 ms + 10 us per sequence) would ask for more tokens per second than one core writes.
CONFIG = (
    "preset: llama-3.1-8b-h100\nmodel: sim-bench\nrecord_lateness: true\n"
    "max_num_seqs: 1024\nmax_waiting: 4096\nnum_kv_blocks: 100000\n"
)
MODEL = "sim-bench"
# Lateness while hundreds of connections arrive at once is reported apart from the steady state.
BURST_S = 1.0
LEVELS = (10, 100, 500)


def start_server(workdir: Path) -> SimProcess:
    """The simulator on CPU 0 and this client on CPU 1, when there are two."""
    config = workdir / "sim.yaml"
    config.write_text(CONFIG)
    two = len(os.sched_getaffinity(0)) > 1
    server = SimProcess(["--config", str(config)], cpus={0} if two else None).__enter__()
    if two:
        os.sched_setaffinity(0, {1})
    return server


async def http(host: str, port: int, method: str, path: str, body: dict[str, Any] | None = None) -> bytes:
    """One raw HTTP/1.1 exchange with ``Connection: close``; returns the whole response."""
    reader, writer = await asyncio.open_connection(host, port)
    payload = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: sim\r\nConnection: close\r\nContent-Type: application/json\r\n"
    writer.write(f"{head}Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
    chunks = []
    while chunk := await reader.read(262144):
        chunks.append(chunk)
    writer.close()
    return b"".join(chunks)


async def count_stream(host: str, port: int, body: dict[str, Any]) -> int:
    """Stream one response, counting ``data:`` events without parsing them (cheap on the client side)."""
    response = await http(host, port, "POST", "/v1/completions", body)
    return response.count(b"data: ") - 1  # [DONE]


async def lateness(host: str, port: int) -> dict[str, float]:
    raw = await http(host, port, "GET", "/debug/lateness")
    return dict(json.loads(raw.split(b"\r\n\r\n", 1)[1]))


async def scenario(host: str, port: int, bodies: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Run ``bodies`` concurrently; lateness of the first ``BURST_S`` (connections arriving) and after it."""
    before = await lateness(host, port)
    started = time.monotonic()
    streams = asyncio.gather(*(count_stream(host, port, body) for body in bodies))
    await asyncio.sleep(BURST_S)
    burst = await lateness(host, port)
    counts = await streams
    steady = await lateness(host, port)
    steady["tokens"] = float(sum(counts))
    steady["wall_s"] = time.monotonic() - started
    steady["cpu_used_s"] = steady["cpu_s"] - before["cpu_s"]
    return {"burst": burst, "steady": steady}


def scripted_bodies(streams: int, tokens: int, gap: float) -> list[dict[str, Any]]:
    return [
        {
            "model": MODEL,
            "prompt": "x",
            "max_tokens": tokens,
            "stream": True,
            "sim": {"script": {"ttft": 0.2 + gap * i / streams, "gaps": gap}},
        }
        for i in range(streams)
    ]


def engine_bodies(streams: int, tokens: int) -> list[dict[str, Any]]:
    return [{"model": MODEL, "prompt": "x", "max_tokens": tokens, "stream": True} for _ in range(streams)]


def ms(value: float) -> str:
    return f"{value * 1000:7.3f}"


Rounds = list[dict[int, dict[str, dict[str, float]]]]


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _ratio(window: dict[str, float], floor: dict[str, float]) -> str:
    """p99 over the floor's p99; a window with no writes (a short run all in its first second) has none."""
    if "p99" not in window or "p99" not in floor:
        return "    -"
    return f"{window['p99'] / floor['p99']:5.2f}"


def print_lateness(title: str, rounds: Rounds) -> None:
    """Per stream count: the median over rounds of each figure, and each round's p99/floor ratio."""
    print(f"\n{title} (median of {len(rounds)} rounds)")
    print(f"  streams | steady state (after the first {BURST_S:.0f} s)           | first {BURST_S:.0f} s")
    print("          |  writes   p50 ms   p99 ms   max ms | p99/floor per round |   p99 ms   max ms")
    floor = min(rounds[0])
    for streams in rounds[0]:
        steady = [r[streams]["steady"] for r in rounds]
        burst = [r[streams]["burst"] for r in rounds]
        ratios = " ".join(_ratio(r[streams]["steady"], r[floor]["steady"]) for r in rounds)

        def med(windows: list[dict[str, float]], key: str) -> str:
            return ms(_median([w[key] for w in windows if key in w]))

        writes = int(_median([w["count"] for w in steady]))
        figures = f"{med(steady, 'p50')}  {med(steady, 'p99')}  {med(steady, 'max')}"
        print(
            f"  {streams:7d} | {writes:7d}  {figures} | {ratios:19s} |  {med(burst, 'p99')}  {med(burst, 'max')}"
        )


async def run(host: str, port: int, quick: bool) -> None:
    tokens, rounds, gap = (60, 1, 0.04) if quick else (100, 3, 0.04)
    await count_stream(host, port, scripted_bodies(1, 5, 0.001)[0])  # warm-up
    # Rounds interleave the stream counts so that a burst of VM noise cannot land on one count only.
    scripted: Rounds = []
    for _ in range(rounds):
        scripted.append({n: await scenario(host, port, scripted_bodies(n, tokens, gap)) for n in LEVELS})
    print_lateness(
        f"scripted streams, {tokens} tokens each, {gap * 1000:.0f} ms gaps, phases spread", scripted
    )
    engine_tokens = 2 * tokens
    engine: Rounds = []
    for _ in range(rounds):
        engine.append({n: await scenario(host, port, engine_bodies(n, engine_tokens)) for n in LEVELS})
    print_lateness(f"engine (llama-3.1-8b-h100 preset), {engine_tokens} tokens each, one batch", engine)
    heavy = (await scenario(host, port, scripted_bodies(200, 200 if quick else 500, 0.001)))["steady"]
    print("\nthroughput: 200 scripted streams at 1 ms gaps (demand 200k tokens/s), server on one core")
    print(f"  tokens written      {int(heavy['tokens'])}")
    print(f"  tokens/s wall       {heavy['tokens'] / heavy['wall_s']:,.0f} (includes connecting)")
    print(f"  tokens/s per CPU-s  {heavy['tokens'] / heavy['cpu_used_s']:,.0f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cpus = len(os.sched_getaffinity(0))
        server = start_server(Path(tmp))
        proc = server.process
        host, port = server.url.removeprefix("http://").rsplit(":", 1)[0], int(server.url.rsplit(":", 1)[1])
        try:
            print(f"server pid {proc.pid} on {host}:{port}; {cpus} CPUs; server on CPU 0, client on CPU 1")
            asyncio.run(run(host, port, args.quick))
        finally:
            server.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
