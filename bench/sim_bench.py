"""Benchmark of the simulator's emission: lateness of real SSE writes and tokens/s on one core.

Runs ``fluidity-exporter sim`` in a child process pinned to CPU 0 (``record_lateness: true``) and drives it
from this process (pinned to CPU 1 when there is one) over loopback with raw sockets that only count
bytes, so the client costs little. For each scenario the server reports, for every SSE write, actual
write time minus intended time; this prints p50/p99 at 10, 100 and 500 concurrent streams, with the
10-stream run as the same-run floor (this VM's own wake-up jitter), then throughput when saturated.

Scenarios:

* ``scripted``: independent streams (scripted mode), phases spread evenly over one inter-token gap, as
  streams started at different times are;
* ``engine``: the ``tiny`` engine with every stream in one batch: each step's tokens are all due at the
  same instant, so their writes queue behind each other (the cost of a batch, reported separately);
* ``throughput``: scripted streams with 1 ms gaps, far more than one core can write: tokens written per
  second of wall time and per CPU-second of the server process.

Usage: ``python bench/sim_bench.py [--quick]`` (about 1 minute; ``--quick`` is shorter and noisier).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ENTRY = (
    "import sys; from exporter.cli import build_parser; from exporter.sim.cli import SIM_COMMAND; "
    "args = build_parser({'sim': SIM_COMMAND}).parse_args(sys.argv[1:]); sys.exit(SIM_COMMAND.run(args))"
)
CONFIG = "preset: tiny\nrecord_lateness: true\nmax_num_seqs: 1024\nmax_waiting: 4096\nnum_kv_blocks: 100000\n"


def start_server(workdir: Path) -> tuple[subprocess.Popen[str], str, int]:
    config = workdir / "sim.yaml"
    config.write_text(CONFIG)
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "sim", "--port", "0", "--config", str(config)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    match = re.search(r"http://([\d.]+):(\d+)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"server did not start: {line!r}")
    if len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(proc.pid, {0})
        os.sched_setaffinity(0, {1})
    return proc, match.group(1), int(match.group(2))


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


async def scenario(host: str, port: int, bodies: list[dict[str, Any]]) -> dict[str, float]:
    before = await lateness(host, port)
    started = time.monotonic()
    counts = await asyncio.gather(*(count_stream(host, port, body) for body in bodies))
    wall = time.monotonic() - started
    after = await lateness(host, port)
    after["tokens"] = float(sum(counts))
    after["wall_s"] = wall
    after["cpu_used_s"] = after["cpu_s"] - before["cpu_s"]
    return after


def scripted_bodies(streams: int, tokens: int, gap: float) -> list[dict[str, Any]]:
    return [
        {
            "model": "sim-tiny",
            "prompt": "x",
            "max_tokens": tokens,
            "stream": True,
            "sim": {"script": {"ttft": 0.2 + gap * i / streams, "gaps": gap}},
        }
        for i in range(streams)
    ]


def engine_bodies(streams: int, tokens: int) -> list[dict[str, Any]]:
    return [{"model": "sim-tiny", "prompt": "x", "max_tokens": tokens, "stream": True} for _ in range(streams)]


def ms(value: float) -> str:
    return f"{value * 1000:7.3f}"


def print_lateness(title: str, results: dict[int, dict[str, float]]) -> None:
    floor = results[min(results)]
    print(f"\n{title}")
    print("  streams   writes   p50 ms   p99 ms   max ms   p99/floor-p99")
    for streams, r in results.items():
        ratio = r["p99"] / floor["p99"] if floor["p99"] > 0 else float("nan")
        print(f"  {streams:7d} {int(r['count']):8d}  {ms(r['p50'])}  {ms(r['p99'])}  {ms(r['max'])}   {ratio:6.2f}x")


async def run(host: str, port: int, quick: bool) -> None:
    tokens = 40 if quick else 80
    gap = 0.04
    await count_stream(host, port, scripted_bodies(1, 5, 0.001)[0])  # warm-up
    scripted = {n: await scenario(host, port, scripted_bodies(n, tokens, gap)) for n in (10, 100, 500)}
    print_lateness(f"scripted streams, {tokens} tokens each, {gap * 1000:.0f} ms gaps, phases spread", scripted)
    engine = {n: await scenario(host, port, engine_bodies(n, tokens)) for n in (10, 100, 500)}
    print_lateness(f"engine (tiny preset), {tokens} tokens each, all streams in one batch", engine)
    heavy = await scenario(host, port, scripted_bodies(200, 200 if quick else 400, 0.001))
    print("\nthroughput: 200 scripted streams at 1 ms gaps (demand 200k tokens/s), server on one core")
    print(f"  tokens written      {int(heavy['tokens'])}")
    print(f"  tokens/s wall       {heavy['tokens'] / heavy['span_s']:,.0f}")
    print(f"  tokens/s per CPU-s  {heavy['tokens'] / heavy['cpu_used_s']:,.0f}")
    print(f"  write lateness p50  {ms(heavy['p50'])} ms (saturated: lateness grows by design)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter runs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, host, port = start_server(Path(tmp))
        try:
            print(f"server pid {proc.pid} on {host}:{port}, CPUs available: {len(os.sched_getaffinity(0)) + 1}")
            asyncio.run(run(host, port, args.quick))
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
