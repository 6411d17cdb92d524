"""Benchmark: what the daemon's own work does to its probes' timings.

Run: ``python bench/interference_bench.py [--rounds 4] [--phase-seconds 12]``. The daemon runs in this
process (its event loop is the one the probes stamp on); the simulator, a vLLM-sized engine page and a
``/metrics`` flood run in child processes. Each round runs every phase once, in turn (interleaved, so a
busy machine weighs on all of them alike), and the script prints, per phase, the probe requests
flagged unreliable (``ProbeResult.unreliable``, the saturation rule) and the ratio to the quiet phase:

* ``quiet``: probes only, the baseline;
* ``flood, cached``: 570 ``/metrics`` a second, rendered at most once a second (the default);
* ``flood, uncached``: the same flood, rendered for every scrape (as before);
* ``scrape, apart``: the engine page (~110 KiB) scraped on the probes' interval, waiting for them (the
  default);
* ``scrape, in step``: the same scrape started with the probes, as before.

The daemon's CPU seconds per phase (getrusage) are printed beside: they do not depend on the other
processes of a busy machine as the flags do.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from exporter.app import Daemon, web_app
from exporter.settings.parse import load_config
from exporter.sim.process import SimProcess
from exporter.streams.result import ProbeResult
from exporter.web.routes import METRICS

FLOOD_PER_S = 570
CONFIG = """
global: {{windows: [1m, 5m]}}
targets:
  - name: sim
    url: '{sim}'
    api: completions
    simulated: true
    engine_metrics: {{url: '{page}/metrics', kind: vllm, model: sim-tiny, interval: 2s}}
modules:
  stream:
    workload: {{prompt_tokens: 'fixed:64', output_tokens: 'fixed:48'}}
    requests_per_run: 4
    concurrency: 4
    schedule: {{interval: 2s}}
"""

# A child serving a vLLM page of ~110 KiB: the simulator's page and eight more models' copies of it.
PAGE_SERVER = textwrap.dedent(
    """
    import sys, urllib.request
    from aiohttp import web
    page = urllib.request.urlopen(sys.argv[1] + "/metrics").read().decode()
    body = page + "".join(
        line.replace('model_name="sim-tiny"', f'model_name="other-{i}"') + "\\n"
        for i in range(8) for line in page.splitlines() if line and not line.startswith("#")
    )
    async def metrics(_):
        return web.Response(text=body, content_type="text/plain")
    app = web.Application()
    app.router.add_get("/metrics", metrics)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[2]), print=lambda *_: None)
    """
)

# A child sending FLOOD_PER_S GETs of /metrics a second over 16 connections until it is killed.
FLOOD = textwrap.dedent(
    """
    import asyncio, sys, time
    import aiohttp
    async def worker(session, url, period):
        next_at = time.monotonic()
        while True:
            async with session.get(url) as response:
                await response.read()
            next_at += period
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    async def main():
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=16)) as session:
            await asyncio.gather(*(worker(session, sys.argv[1], 16 / float(sys.argv[2])) for _ in range(16)))
    asyncio.run(main())
    """
)


@dataclass
class Tally:
    """Probe requests and flags of one phase, over every round."""

    requests: int = 0
    flagged: int = 0
    cpu_s: float = 0.0
    seconds: float = 0.0
    results: list[ProbeResult] = field(default_factory=list)

    def ratio(self) -> float:
        return self.flagged / self.requests if self.requests else float("nan")


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextmanager
def child(script: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    process = subprocess.Popen([sys.executable, "-c", script, *args])
    try:
        yield process
    finally:
        process.kill()
        process.wait()


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_page(url: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1).read()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{url} did not come up")


Phase = Callable[[Daemon, web.Application, str], Any]


def quiet(daemon: Daemon, app: web.Application, url: str) -> None:
    daemon.jobs.scheduler.pause_job("engine:sim")


def flood(cached: bool) -> Phase:
    def phase(daemon: Daemon, app: web.Application, url: str) -> subprocess.Popen[bytes]:
        daemon.jobs.scheduler.pause_job("engine:sim")
        app[METRICS].max_age_s = 1.0 if cached else 0.0
        return subprocess.Popen([sys.executable, "-c", FLOOD, url + "/metrics", str(FLOOD_PER_S)])

    return phase


def scrape(apart: bool) -> Phase:
    def phase(daemon: Daemon, app: web.Application, url: str) -> None:
        daemon.probes.scrapes_apart = apart
        daemon.jobs.scheduler.resume_job("engine:sim")

    return phase


PHASES: dict[str, Phase] = {
    "quiet": quiet,
    "flood, cached": flood(cached=True),
    "flood, uncached": flood(cached=False),
    "scrape, apart": scrape(apart=True),
    "scrape, in step": scrape(apart=False),
}


async def run(sim_url: str, page_url: str, rounds: int, phase_s: float) -> dict[str, Tally]:
    daemon = Daemon(load_config(CONFIG.format(sim=sim_url, page=page_url)), seed=1)
    tallies = {name: Tally() for name in PHASES}
    current: list[Tally] = [Tally()]  # the phase the stored runs count for (the first: warm-up)
    add = daemon.store.add

    def spy(target: str, module: str, results: list[ProbeResult], *args: Any, **kwargs: Any) -> None:
        current[0].results.extend(results)
        add(target, module, results, *args, **kwargs)

    daemon.store.add = spy  # type: ignore[method-assign]
    app = web_app(daemon)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        await asyncio.sleep(phase_s)  # warm-up: context asked, first runs
        for _ in range(rounds):
            for name, phase in PHASES.items():
                tally = tallies[name]
                started, cpu = time.monotonic(), cpu_seconds()
                flooding = phase(daemon, app, url)
                await asyncio.sleep(1.0)  # the phase's load settles: runs started before it are not counted
                current[0] = tally
                await asyncio.sleep(phase_s)
                current[0] = Tally()
                if flooding is not None:
                    flooding.kill()
                    flooding.wait()
                tally.cpu_s += cpu_seconds() - cpu
                tally.seconds += time.monotonic() - started
    finally:
        await runner.cleanup()
    for tally in tallies.values():
        tally.requests = len(tally.results)
        tally.flagged = sum(r.unreliable for r in tally.results)
    return tallies


def report(tallies: dict[str, Tally]) -> None:
    """Per phase: the flagged fraction, the saturation rule's evidence (the share of loop-lag samples
    late by more than 3 ms during a request, and the request's largest lag, medians over requests) and
    the daemon's CPU; each against the quiet phase."""
    q_share, q_lag, q_cpu = evidence(tallies["quiet"])
    print(
        f"{'phase':<16} {'requests':>8} {'flagged':>8} {'lag share':>9} {'x quiet':>7} "
        f"{'max lag ms':>10} {'x quiet':>7} {'CPU %':>6} {'x quiet':>7}"
    )
    for name, tally in tallies.items():
        share, lag, cpu = evidence(tally)
        print(
            f"{name:<16} {tally.requests:>8} {tally.ratio():>8.3f} {share:>9.3f} {ratio(share, q_share):>7.2f} "
            f"{lag * 1e3:>10.2f} {ratio(lag, q_lag):>7.2f} {cpu:>6.1f} {ratio(cpu, q_cpu):>7.2f}"
        )


def evidence(tally: Tally) -> tuple[float, float, float]:
    """(median lag share, median largest lag in s, CPU % of one core) of a phase."""
    shares = sorted(r.loop_lag_share for r in tally.results) or [float("nan")]
    lags = sorted(r.loop_lag_s for r in tally.results) or [float("nan")]
    cpu = 100 * tally.cpu_s / tally.seconds if tally.seconds else float("nan")
    return shares[len(shares) // 2], lags[len(lags) // 2], cpu


def ratio(value: float, base: float) -> float:
    return value / base if base else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--phase-seconds", type=float, default=12.0)
    args = parser.parse_args()
    with SimProcess(["--preset", "tiny"]) as sim:
        port = free_port()
        with child(PAGE_SERVER, sim.url, str(port)):
            page_url = f"http://127.0.0.1:{port}"
            wait_for_page(page_url + "/metrics")
            size = len(urllib.request.urlopen(page_url + "/metrics").read())
            print(f"engine page: {size / 1024:.0f} KiB; flood: {FLOOD_PER_S} /metrics a second")
            report(asyncio.run(run(sim.url, page_url, args.rounds, args.phase_seconds)))


if __name__ == "__main__":
    main()
