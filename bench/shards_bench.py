"""Aggregate client rate over K shard processes: how far one process goes, and how far K go together.

The simulator runs in a child process and serves scripted streams (``TOKENS`` tokens, one every
``GAP_S``), so the server's work is known and small; the clients are ``ShardPool`` runs of 1 and of K
local shard processes (``exporter.load.shards.local``), open loop at a rising rate for ``DURATION_S``
seconds each. Per run: the achieved send rate, output tokens received per second, the p99 of the send
lateness (scheduled to sent), the share of requests the probe flagged unreliable (a saturated client),
the client CPU per token (the shards' ``process_time``), the coordinator's CPU per request (merging
the streamed results: this process's ``process_time``), and whether the run was healthy: every request
OK, lateness p99 <= 25 ms, at the planned rate ("on schedule"), and at most 1% unreliable
(``load.health``'s bounds). The aggregate rate of a client is the highest rate it stays on schedule
(and, separately, healthy).

Usage: ``python bench/shards_bench.py [--workers K] [--rates 50,100,...] [--duration S] [--pin]``
(``--pin``: the simulator on CPU 0, the shards on the others, as ``probe_bench`` does). About 2 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from exporter.load.plan import LoadPlan
from exporter.load.shards.local import local_shards
from exporter.settings.cpus import available_cpus
from exporter.settings.shards import PoolSettings
from exporter.settings.target import TargetSettings
from exporter.sim.process import SimProcess
from exporter.streams.request import RequestSpec, Timeouts
from exporter.streams.result import Outcome

TOKENS = 32
GAP_S = 0.020
TTFT_S = 0.020
DURATION_S = 6.0
RATES = (50, 100, 150, 200, 300, 400)
MAX_LATENESS_P99_S = 0.025
MAX_UNRELIABLE = 0.01
CONFIG = "preset: tiny\nmax_waiting: 100000\nmax_num_seqs: 100000\n"
# The bench judges the runs itself: the pool must not refuse them.
LENIENT = PoolSettings(start_delay_s=1.0, max_start_lateness_s=10.0, max_unreliable_share=1.0)


@dataclass
class Run:
    """One client at one rate."""

    client: str
    rate: float
    achieved: float
    tokens_per_s: float
    lateness_p99_ms: float
    unreliable: float
    cpu_us_per_token: float
    coordinator_us_per_request: float
    failed: int
    problems: list[str]

    @property
    def on_schedule(self) -> bool:
        """The client kept up: every request OK, sent on time, at the planned rate."""
        return (
            self.failed == 0
            and self.lateness_p99_ms <= MAX_LATENESS_P99_S * 1e3
            and self.achieved >= 0.95 * self.rate
        )

    @property
    def healthy(self) -> bool:
        """On schedule and its timings trusted (the probe flagged at most 1% of requests)."""
        return self.on_schedule and self.unreliable <= MAX_UNRELIABLE


def plan(rate: float, duration: float) -> tuple[list[RequestSpec], list[float]]:
    count = int(rate * duration)
    script = (("sim", {"script": {"ttft": TTFT_S, "gaps": GAP_S}}),)
    specs = [RequestSpec(f"p{i}", TOKENS, 4, None, f"r{i}", script) for i in range(count)]
    return specs, [i / rate for i in range(count)]


async def run(url: str, workers: int, rate: float, duration: float) -> Run:
    settings = TargetSettings(url, api="completions", timeouts=Timeouts(ttft=10, idle=10, total=60))
    specs, offsets = plan(rate, duration)
    async with local_shards(workers, None, LENIENT) as pool:
        coordinator_cpu = time.process_time()
        report = await pool.run_plan(settings, LoadPlan(specs, offsets))
        coordinator_cpu = time.process_time() - coordinator_cpu
    results = report.in_order()
    sends = sorted(r.sent_at for r in results if r.sent_at is not None)
    late = sorted(r.send_overhead_s or 0.0 for r in results)
    tokens = sum(r.output_tokens for r in results)
    ends = [r.finished_at for r in results if r.finished_at is not None]
    span = max(ends) - min(sends) if ends and sends else float("nan")
    cpu = sum(float(s.stats.get("cpu_s", 0.0)) for s in report.states)
    return Run(
        f"{workers} process{'es' if workers > 1 else ''}",
        rate,
        (len(sends) - 1) / (sends[-1] - sends[0]) if len(sends) > 1 else 0.0,
        tokens / span,
        late[min(len(late) - 1, int(0.99 * len(late)))] * 1e3,
        sum(r.unreliable for r in results) / len(results),
        cpu / tokens * 1e6 if tokens else float("nan"),
        coordinator_cpu / len(specs) * 1e6,
        sum(r.outcome is not Outcome.OK for r in results) + len(specs) - len(results),
        report.problems,
    )


def show(result: Run) -> None:
    verdict = "healthy" if result.healthy else ("on schedule" if result.on_schedule else "behind")
    print(
        f"{result.client:>12} {result.rate:>6.0f} {result.achieved:>9.1f} {result.tokens_per_s:>9.0f} "
        f"{result.lateness_p99_ms:>9.2f} {result.unreliable:>9.1%} {result.cpu_us_per_token:>8.1f} {result.coordinator_us_per_request:>9.0f}  {verdict}",
        flush=True,
    )
    for problem in result.problems:
        if "saturated" not in problem:  # the flagged column says that
            print(f"{'':>12} {problem}", flush=True)


async def main_async(url: str, workers: int, rates: tuple[float, ...], duration: float) -> None:
    await run(url, 1, 10, 1.0)  # warm-up: imports, first connections
    print(
        f"{'client':>12} {'req/s':>6} {'achieved':>9} {'tokens/s':>9} {'late p99':>9} {'flagged':>9} {'us/tok':>8} {'coord/req':>9}"
    )
    best: dict[tuple[str, str], float] = {}
    for rate in rates:
        for count in (1, workers):
            result = await run(url, count, rate, duration)
            show(result)
            for kind, ok in (("healthy", result.healthy), ("on schedule", result.on_schedule)):
                if ok:
                    best[result.client, kind] = max(best.get((result.client, kind), 0.0), rate)
    for (client, kind), rate in sorted(best.items()):
        print(f"aggregate rate, {client}, {kind}: {rate:g} req/s ({rate * TOKENS:,.0f} tokens/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rates", help="comma-separated request rates")
    parser.add_argument("--duration", type=float, default=DURATION_S)
    parser.add_argument("--pin", action="store_true", help="simulator on CPU 0, shards on the others")
    args = parser.parse_args()
    rates = tuple(float(r) for r in args.rates.split(",")) if args.rates else RATES
    cpus = sorted(os.sched_getaffinity(0))
    print(
        f"{available_cpus()} usable CPUs; {TOKENS} tokens per stream at {GAP_S * 1e3:.0f} ms gaps, "
        f"{args.duration:g} s per run; 1 vs {args.workers} shard processes",
        file=sys.stderr,
    )
    with tempfile.TemporaryDirectory() as workdir:
        config = Path(workdir) / "sim.yaml"
        config.write_text(CONFIG)
        pin = {cpus[0]} if args.pin and len(cpus) > 1 else None
        with SimProcess(["--config", str(config)], cpus=pin) as sim:
            if pin:
                os.sched_setaffinity(0, set(cpus[1:]))  # the shard processes inherit this
            asyncio.run(main_async(sim.url, args.workers, rates, args.duration))


if __name__ == "__main__":
    main()
