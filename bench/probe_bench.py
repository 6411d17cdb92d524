"""Accuracy benchmark of the probe client: inter-token gap error against a known schedule.

The simulator runs in a child process (``fluidity-exporter sim``, pinned to CPU 0 when there are two or
more CPUs, the clients get the others) and serves scripted streams: every chunk ``GAP_S`` (20 ms) after
the previous one, one token per chunk, phases spread evenly over one gap. The ground truth is the script
itself: each measured gap's error is ``measured - GAP_S``. The simulator's own write lateness (read from
its ``/debug/lateness``) is printed next to it, because it is part of every client's error.

Three clients, at 10 (the floor), 100, 500 and 1000 concurrent streams:

* ``baseline``: a minimal vLLM ``bench serve``-style client written here: aiohttp, ``iter_any``, split on
  blank lines, ``json.loads``, one ``perf_counter`` per chunk, one process;
* ``probe``: ``ProbeClient`` in one process (``run_plan``);
* ``workers``: ``ProbeClient`` spread over worker processes (``run_plan_in_workers``).

At 10 and 100 streams each client runs three times, interleaved, and every figure is the median over
the runs (this VM's noise otherwise decides the p99); 500 and 1000 run once. Per run: median measured gap, p50 and p99 of ``|error|``, the share of gaps read as < 1 ms (chunks read
together), the share of requests our saturation detection flagged unreliable, client CPU per chunk
(``time.process_time`` of the client process, or the sum over the workers) and chunks per CPU-second (=
chunks/s one core parses). Usage: ``python bench/probe_bench.py [--quick] [--tokens N] [--workers N]``;
the default run takes about 2 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from exporter.probe import ProbeClient, ProbeResult, RequestSpec, TargetSettings, Timeouts, intervals
from exporter.probe.workers import WorkerStats, run_plan, run_plan_in_workers
from exporter.sim.process import SimProcess

MODEL = "sim-bench"
CONFIG = f"preset: tiny\nmodel: {MODEL}\nrecord_lateness: true\nmax_waiting: 8192\n"
GAP_S = 0.020
# Streams start after every connection is up, so the connection burst does not overlap the measurement.
FIRST_TOKEN_S = 1.0
LOADS = (10, 100, 500, 1000)
CLIENTS = ("baseline", "probe", "workers")
CLIENT_ORDER = {name: index for index, name in enumerate(CLIENTS)}
P50_GOAL_S = 0.0001
FLOOR_FACTOR_GOAL = 1.5


@dataclass
class Run:
    """One client at one load: every measured gap, and what the run cost."""

    client: str
    streams: int
    gaps: list[float] = field(default_factory=list)
    chunks: int = 0
    cpu_s: float = 0.0
    failed: int = 0
    flagged: int | None = None  # requests marked unreliable (None: the client cannot tell)
    multi_reads: int | None = None
    lag_share: float | None = None  # mean over requests of the share of loop-lag samples over the limit
    server: dict[str, float] = field(default_factory=dict)

    def errors(self) -> list[float]:
        return sorted(abs(g - GAP_S) for g in self.gaps)


# -- the server ------------------------------------------------------------------------------------


def start_server(workdir: Path) -> SimProcess:
    """The simulator on the first CPU; this process (and the workers it spawns) on the others."""
    config = workdir / "sim.yaml"
    config.write_text(CONFIG)
    cpus = sorted(os.sched_getaffinity(0))
    server = SimProcess(["--config", str(config)], cpus={cpus[0]} if len(cpus) > 1 else None).__enter__()
    if len(cpus) > 1:
        os.sched_setaffinity(0, set(cpus[1:]))  # spawned workers inherit this
    return server


async def server_lateness(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/debug/lateness") as resp:
        return dict(await resp.json())


# -- the workload ----------------------------------------------------------------------------------


def sim_script(index: int, streams: int) -> dict[str, Any]:
    return {"script": {"ttft": FIRST_TOKEN_S + GAP_S * index / streams, "gaps": GAP_S}}


def plan(streams: int, tokens: int) -> list[tuple[float, RequestSpec]]:
    return [
        (0.0, RequestSpec(prompt="x", max_tokens=tokens, extra_body=(("sim", sim_script(i, streams)),)))
        for i in range(streams)
    ]


def settings(url: str) -> TargetSettings:
    # The same plain stream the baseline asks for: no token ids, no per-chunk usage.
    return TargetSettings(
        base_url=url,
        api="completions",
        model=MODEL,
        ignore_eos=False,
        send_min_tokens=False,
        request_token_ids=False,
        request_continuous_usage=False,
        timeouts=Timeouts(connect=10.0, ttft=30.0, idle=10.0, total=120.0),
    )


# -- the baseline: how vLLM's `bench serve` reads a stream -------------------------------------------


async def baseline_request(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> list[float]:
    """vLLM ``bench serve``-style: perf_counter per parsed chunk, inter-token latencies as their gaps."""
    itl: list[float] = []
    most_recent = time.perf_counter()
    first = True
    buffer = ""
    async with session.post(url + "/v1/completions", json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"baseline: HTTP {response.status}")
        async for chunk_bytes in response.content.iter_any():
            buffer += chunk_bytes.decode("utf-8")
            *messages, buffer = buffer.split("\n\n")
            for message in messages:
                data = message.strip().removeprefix("data: ")
                if not data or data == "[DONE]":
                    continue
                choices = json.loads(data).get("choices")
                if choices and choices[0].get("text"):
                    timestamp = time.perf_counter()
                    if not first:
                        itl.append(timestamp - most_recent)
                    first = False
                    most_recent = timestamp
    return itl


async def run_baseline(url: str, streams: int, tokens: int) -> Run:
    run = Run("baseline", streams)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=300)
    ) as session:
        bodies = [
            {
                "model": MODEL,
                "prompt": "x",
                "max_tokens": tokens,
                "stream": True,
                "stream_options": {"include_usage": True},
                "sim": sim_script(i, streams),
            }
            for i in range(streams)
        ]
        cpu = time.process_time()
        outcomes = await asyncio.gather(
            *(baseline_request(session, url, b) for b in bodies), return_exceptions=True
        )
        run.cpu_s = time.process_time() - cpu
    for itl in outcomes:
        if isinstance(itl, BaseException):
            run.failed += 1
            continue
        run.gaps.extend(itl)
        run.chunks += len(itl) + 1
    return run


# -- our client --------------------------------------------------------------------------------------


def collect(run: Run, results: list[ProbeResult]) -> Run:
    run.flagged = sum(r.unreliable for r in results)
    run.multi_reads = sum(r.multi_event_reads for r in results)
    run.lag_share = statistics.fmean(r.loop_lag_share for r in results)
    for result in results:
        if not result.ok:
            run.failed += 1
        run.gaps.extend(intervals(result)[1:])
        run.chunks += len(result.token_times)
    return run


async def run_probe(url: str, streams: int, tokens: int) -> Run:
    async with ProbeClient(settings(url)) as client:
        cpu = time.process_time()
        results = await run_plan(client, plan(streams, tokens))
        cpu = time.process_time() - cpu
    run = collect(Run("probe", streams), results)
    run.cpu_s = cpu
    return run


async def run_workers(url: str, streams: int, tokens: int, workers: int) -> Run:
    stats: list[WorkerStats] = []
    results = await asyncio.to_thread(
        run_plan_in_workers, settings(url), plan(streams, tokens), workers, stats=stats
    )
    run = collect(Run(f"workers x{workers}", streams), results)
    run.cpu_s = sum(s.cpu_s for s in stats)  # from the common start: worker start-up excluded
    return run


async def measure(url: str, client: str, streams: int, tokens: int, workers: int) -> Run:
    async with aiohttp.ClientSession() as session:
        await server_lateness(session, url)  # reset the server's record
        if client == "baseline":
            run = await run_baseline(url, streams, tokens)
        elif client == "probe":
            run = await run_probe(url, streams, tokens)
        else:
            run = await run_workers(url, streams, tokens, workers)
        run.server = await server_lateness(session, url)
    return run


# -- the report --------------------------------------------------------------------------------------


def pct(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(q / 100 * len(sorted_values)))]


@dataclass(frozen=True)
class Figures:
    """The printed figures of one run (or the medians over repeated runs)."""

    median_gap: float
    p50: float
    p99: float
    below_1ms: float
    lag_share: float
    flagged: float  # NaN: the client cannot tell
    cpu_us: float
    per_core: float
    failed: float
    server_p50: float
    server_p99: float

    @classmethod
    def of(cls, run: Run) -> Figures:
        errors = run.errors()
        return cls(
            median_gap=statistics.median(run.gaps) if run.gaps else float("nan"),
            p50=pct(errors, 50),
            p99=pct(errors, 99),
            below_1ms=sum(g < 0.001 for g in run.gaps) / max(len(run.gaps), 1),
            lag_share=float("nan") if run.lag_share is None else run.lag_share,
            flagged=float("nan") if run.flagged is None else run.flagged / run.streams,
            cpu_us=run.cpu_s / max(run.chunks, 1) * 1e6,
            per_core=run.chunks / run.cpu_s if run.cpu_s > 0 else float("nan"),
            failed=run.failed,
            server_p50=run.server.get("p50", float("nan")),
            server_p99=run.server.get("p99", float("nan")),
        )

    @classmethod
    def median(cls, runs: list[Figures]) -> Figures:
        names = cls.__dataclass_fields__
        return cls(**{n: statistics.median(getattr(r, n) for r in runs) for n in names})


def _share(value: float, digits: int) -> str:
    return "   n/a" if math.isnan(value) else f"{value:6.{digits}%}"


def row(streams: int, client: str, reps: int, f: Figures) -> str:
    return (
        f"{streams:6d}  {client:12s} {reps:3d}  {f.median_gap * 1e3:8.3f} {f.p50 * 1e3:8.3f} "
        f"{f.p99 * 1e3:8.3f} {f.below_1ms:7.1%} {_share(f.lag_share, 1)} {_share(f.flagged, 0)} "
        f"{f.cpu_us:7.1f} {f.per_core:9,.0f} {f.failed:5.0f}   {f.server_p50 * 1e3:5.2f}/{f.server_p99 * 1e3:6.2f}"
    )


HEADER = (
    "streams  client       reps  med ITL   p50|e|   p99|e|   <1 ms lag>3ms flagged  us/chk chunks/cpu-s"
    "  fail   server late\n"
    "                              (ms)     (ms)     (ms)                                                "
    "     p50/p99 ms"
)


def verdicts(table: dict[tuple[str, int], Figures], loads: tuple[int, ...]) -> list[str]:
    lines = []
    clients = list(dict.fromkeys(c for c, _ in table))
    for client in clients:
        floor = table[client, loads[0]].p99
        for streams in loads:
            f = table[client, streams]
            notes = [
                f"p50 {'<=' if f.p50 <= P50_GOAL_S else '>'} 0.1 ms",
                f"p99 = {f.p99 / floor:.2f}x floor",
            ]
            if not math.isnan(f.flagged):
                notes.append(f"{f.flagged:.0%} of requests flagged unreliable")
            if f.server_p50 > 0.001:
                notes.append("the simulator itself missed its schedule (server lateness p50 > 1 ms)")
            lines.append(f"  {client:12s} {streams:5d}: " + "; ".join(notes))
    baseline, probe = clients[0], clients[1]
    for streams in loads:
        b, p = table[baseline, streams], table[probe, streams]
        ahead = [name for name in ("p50", "p99", "cpu_us") if getattr(p, name) < getattr(b, name)]
        lines.append(f"  probe vs baseline at {streams:4d} streams: ahead on {', '.join(ahead) or 'nothing'}")
    return lines


async def main_async(url: str, loads: tuple[int, ...], tokens: int, workers: int, reps: int) -> None:
    table: dict[tuple[str, int], Figures] = {}
    await measure(url, "probe", 10, 5, workers)  # warm-up: imports, first connections
    print(HEADER)
    for streams in loads:
        # Repeated and interleaved (the order rotates) at the light loads, where this VM's noise
        # decides the p99; the heavy loads run once.
        count = reps if streams <= 100 else 1
        runs: dict[str, list[Figures]] = {}
        for rep in range(count):
            order = CLIENTS[rep % len(CLIENTS) :] + CLIENTS[: rep % len(CLIENTS)]
            for client in order:
                run = await measure(url, client, streams, tokens, workers)
                runs.setdefault(run.client, []).append(Figures.of(run))
        for client, figures in sorted(runs.items(), key=lambda kv: CLIENT_ORDER[kv[0].split()[0]]):
            table[client, streams] = Figures.median(figures)
            print(row(streams, client, len(figures), table[client, streams]), flush=True)
    print(
        "\ngoals (p50 |error| <= 0.1 ms; p99 at 100 streams <= 1.5x the 10-stream floor; beyond: or flagged)"
    )
    print("\n".join(verdicts(table, loads)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer tokens and loads 10, 100, 500")
    parser.add_argument("--tokens", type=int, help="tokens per stream (default 100; quick 40)")
    parser.add_argument("--workers", type=int, help="worker processes for the workers client")
    parser.add_argument("--reps", type=int, help="repetitions at 10 and 100 streams (default 3; quick 1)")
    args = parser.parse_args()
    reps = args.reps or (1 if args.quick else 3)
    tokens = args.tokens or (40 if args.quick else 100)
    loads = LOADS[:3] if args.quick else LOADS
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp))
        proc, url = server.process, server.url
        cpus = len(os.sched_getaffinity(0))
        workers = args.workers or max(2, min(8, cpus))
        try:
            load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
            print(
                f"simulator pid {proc.pid} at {url} on its own CPU; clients on {cpus} CPU(s); "
                f"{tokens} tokens per stream, {GAP_S * 1e3:.0f} ms scripted gaps; {workers} workers; "
                f"load average before: {load}"
            )
            if workers > cpus:
                print(
                    f"note: {workers} workers share {cpus} client CPU(s): no spare core for them on this "
                    "machine, so the workers client can only show its overhead here, not its gain"
                )
            asyncio.run(main_async(url, loads, tokens, workers, reps))
        finally:
            server.__exit__(None, None, None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
