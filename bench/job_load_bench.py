"""Benchmark: a capacity job's trial requests flagged unreliable, sent from a worker process (the
daemon's default) or from the daemon's own event loop (as before), while the daemon probes the target's
neighbour, scrapes an engine page and serves ``/metrics`` floods.

Run: ``python bench/job_load_bench.py [--jobs 4]``. The daemon runs in this process; the simulator, a
second simulator probed as the daemon's other target, and a ``/metrics`` flood run in child processes.
The two ways alternate job by job (interleaved); the baseline is the daemon's process, reached by
forcing ``job_shards(in_process=True)`` for its jobs. Prints, per way, the trials' requests, those
flagged unreliable (each trial's ``figures``, or a saturated worker's count in the job's error) and
the ratio to the baseline, and the jobs' states.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import aiohttp
from aiohttp import web

from exporter.app import Daemon, web_app
from exporter.jobs import capacity_runner
from exporter.settings import load_config_file
from exporter.sim.process import SimProcess

TOKEN = "bench-token"
CONFIG = """
global: {{windows: [5m], state_dir: {state}}}
targets:
  - name: sim
    url: '{sim}'
    api: completions
    simulated: true
    engine_metrics: {{url: '{sim}/metrics', kind: vllm, interval: 1s}}
    modules: [short]
  - name: other
    url: '{other}'
    api: completions
    simulated: true
    modules: [short]
modules:
  short:
    workload: {{prompt_tokens: 'fixed:64', output_tokens: 'fixed:32'}}
    requests_per_run: 2
    concurrency: 2
    schedule: {{interval: 1s}}
jobs:
  api_token: {{file: {token}}}
  limits: {{max_rate: 60, max_tokens: 20000000, max_duration: 10m}}
"""
SEARCH = {
    "target": "sim", "start": 10, "max_trials": 2, "requests_per_trial": 200, "warmup_requests": 10,
    "slo": {"prefill_deadline_s": 1.0},
}  # fmt: skip
FLOOD = (
    "import asyncio, sys, aiohttp\n"
    "async def w(s, u):\n"
    "    while True:\n"
    "        async with s.get(u) as r: await r.read()\n"
    "        await asyncio.sleep(0.02)\n"
    "async def main():\n"
    "    async with aiohttp.ClientSession() as s: await asyncio.gather(*(w(s, sys.argv[1]) for _ in range(8)))\n"
    "asyncio.run(main())\n"
)
HEADERS = {"Authorization": f"Bearer {TOKEN}"}


def in_process(job_shards: Callable[..., Any]) -> Callable[..., Any]:
    """``job_shards`` that keeps a one-worker job's load in the daemon's process (the baseline)."""

    def shards(*args: Any, **kwargs: Any) -> Any:
        kwargs["in_process"] = True
        return job_shards(*args, **kwargs)

    return shards


@asynccontextmanager
async def served(daemon: Daemon) -> AsyncIterator[str]:
    runner = web.AppRunner(web_app(daemon), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def one_job(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.post(f"{url}/api/v1/jobs/capacity", json=SEARCH, headers=HEADERS) as response:
        record = await response.json()
    while record.get("state") == "running":
        await asyncio.sleep(0.5)
        async with session.get(f"{url}/api/v1/jobs/{record['id']}", headers=HEADERS) as response:
            record = await response.json()
    return dict(record)


def flagged(record: dict[str, Any]) -> tuple[int, int]:
    """(requests, flagged unreliable) over the job's trials; of a job a saturated worker failed, what its
    error says ("shard 0 was saturated: 210 of 210 results unreliable")."""
    saturated = re.search(r"(\d+) of (\d+) results unreliable", record.get("error") or "")
    if saturated is not None:
        return int(saturated[2]), int(saturated[1])
    trials = (record.get("result") or {}).get("trials", [])
    figures = [t.get("figures", {}) for t in trials]
    return sum(f.get("requests", 0) for f in figures), sum(f.get("unreliable", 0) for f in figures)


async def run(sim: str, other: str, jobs: int, folder: Path) -> dict[str, list[dict[str, Any]]]:
    token = folder / "token"
    token.write_text(TOKEN)
    path = folder / "config.yaml"
    path.write_text(CONFIG.format(sim=sim, other=other, state=folder / "state", token=token))
    daemon = Daemon(load_config_file(path), config_path=str(path), seed=1)
    worker, here = capacity_runner.job_shards, in_process(capacity_runner.job_shards)
    records: dict[str, list[dict[str, Any]]] = {"worker process": [], "daemon's loop": []}
    async with served(daemon) as url, aiohttp.ClientSession() as session:
        flood = subprocess.Popen([sys.executable, "-c", FLOOD, url + "/metrics"])
        try:
            await asyncio.sleep(3)  # the probes and the scrape under way
            for _ in range(jobs):
                for way, shards in (("worker process", worker), ("daemon's loop", here)):
                    capacity_runner.job_shards = shards  # type: ignore[assignment]
                    records[way].append(await one_job(session, url))
        finally:
            capacity_runner.job_shards = worker  # type: ignore[assignment]
            flood.kill()
            flood.wait()
    return records


def report(records: dict[str, list[dict[str, Any]]]) -> None:
    base_total, base_flagged = map(sum, zip(*(flagged(r) for r in records["daemon's loop"]), strict=True))
    base = base_flagged / base_total if base_total else float("nan")
    print(f"{'load sent from':<16} {'requests':>8} {'flagged':>8} {'fraction':>9} {'x baseline':>10}  states")
    for way, jobs in records.items():
        total, bad = map(sum, zip(*(flagged(r) for r in jobs), strict=True))
        fraction = bad / total if total else float("nan")
        states = ", ".join(str(r["state"]) for r in jobs)
        times = fraction / base if base else float("nan")
        print(f"{way:<16} {total:>8} {bad:>8} {fraction:>9.4f} {times:>10.2f}  {states}")
        for record in jobs:
            if record.get("error"):
                print(f"  {way}: {record['error']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4, help="jobs each way (default 4)")
    args = parser.parse_args()
    with (
        SimProcess(["--preset", "tiny"]) as sim,
        SimProcess(["--preset", "tiny"]) as other,
        TemporaryDirectory() as folder,
    ):
        report(asyncio.run(run(sim.url, other.url, args.jobs, Path(folder))))


if __name__ == "__main__":
    main()
