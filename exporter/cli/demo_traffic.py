"""``fluidity-exporter demo --traffic``: the traffic observer on this machine, in one command.

Starts the built-in simulator, the exporter (probing the simulator, and observing real traffic), a real
Envoy in front of the simulator whose ext_proc filter feeds the exporter's observer (the bootstrap of
``envoy-config``), and a little user traffic through Envoy; prints where ``fluidity_traffic_*`` shows on
``/metrics`` and what users felt so far, then serves until Ctrl-C (or ``--duration``). Exit 0, or 2 when
an extra is missing or a port is taken (the message says which).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import socket
import sys
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import Daemon, web_app
from exporter.cli.command import EXIT_MEASURED, EXIT_USAGE
from exporter.settings import SettingsError, parse_config
from exporter.sim import SimConfig, SimServer
from exporter.traffic.envoy_process import EnvoyError, EnvoyProcess, envoy_binary, write_loopback_bootstrap

USERS_PER_SECOND = 2.0  # Poisson arrivals of user streams through Envoy: a little traffic, not a load
MAX_IN_FLIGHT = 8
MAX_TOKENS = (16, 64)  # each user asks for a number of tokens drawn from this range
MAX_BODY_BYTES = 1 << 20  # the simulator's answers are a few KiB: a bound, not a limit it meets
FIRST_FIGURES_S = 30.0  # how long to wait for the first observed requests before saying so
PROMPTS = ("Tell me about fluid token rates.", "Why do streamed answers stall?", "Summarize Etalon.")


@dataclass(frozen=True)
class Addresses:
    """Where each part listens (all on loopback)."""

    metrics: str  # the exporter's /metrics base URL
    envoy_port: int
    observer_port: int
    sim_url: str
    model: str


def free_port() -> int:
    """A loopback port nothing listens on now (Envoy's bootstrap needs a number, not 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def daemon_config(sim_url: str, model: str, state_dir: Path) -> str:
    """The exporter's config: probes of the simulator every 10 s, and the observer on a free port."""
    return f"""
global:
  windows: [1m]
  state_dir: {state_dir}
targets:
  - name: sim
    url: {sim_url}
    api: chat
    simulated: true
    engine_metrics: {{url: "{sim_url}/metrics", kind: vllm, interval: 5s}}
    modules: [chat]
modules:
  chat:
    workload: {{prompt_tokens: "uniform:low=64,high=256", output_tokens: "fixed:32"}}
    requests_per_run: 2
    schedule: {{interval: 10s}}
traffic:
  ext_proc_address: "127.0.0.1:0"
  models: ["{model}"]
"""


async def user_stream(session: aiohttp.ClientSession, envoy: str, model: str, rng: random.Random) -> None:
    """One streaming chat request through Envoy, read to its end (bounded); failures are the demo's
    to ignore: the observer counts them by outcome."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": rng.choice(PROMPTS)}],
        "max_tokens": rng.randint(*MAX_TOKENS),
        "stream": True,
    }
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
        async with session.post(f"{envoy}/v1/chat/completions", json=body) as response:
            read = 0
            async for chunk in response.content.iter_chunked(1 << 16):
                read += len(chunk)
                if read > MAX_BODY_BYTES:
                    break


async def users(envoy: str, model: str, stop: asyncio.Event, seed: int = 1) -> None:
    """User streams through Envoy at ``USERS_PER_SECOND`` (Poisson), at most ``MAX_IN_FLIGHT`` at once."""
    rng = random.Random(seed)
    slots = asyncio.Semaphore(MAX_IN_FLIGHT)
    tasks: set[asyncio.Task[None]] = set()
    timeout = aiohttp.ClientTimeout(total=60, sock_read=30)

    async def one(session: aiohttp.ClientSession) -> None:
        async with slots:
            await user_stream(session, envoy, model, rng)

    async with aiohttp.ClientSession(timeout=timeout) as session:
        while not stop.is_set():
            task = asyncio.create_task(one(session))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), rng.expovariate(USERS_PER_SECOND))
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def users_figures(text: str) -> list[str]:
    """Lines saying what users felt, from a /metrics text: requests by outcome, and per decode tier
    the service-level fluidity (1 - missed / all token deadlines)."""
    requests: dict[str, float] = {}
    deadlines: dict[str, float] = {}
    missed: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "fluidity_traffic_requests_total":
                requests[sample.labels["outcome"]] = requests.get(sample.labels["outcome"], 0) + sample.value
            elif sample.name == "fluidity_traffic_deadlines_total":
                deadlines[sample.labels["tier"]] = deadlines.get(sample.labels["tier"], 0) + sample.value
            elif sample.name == "fluidity_traffic_deadlines_missed_total":
                missed[sample.labels["tier"]] = missed.get(sample.labels["tier"], 0) + sample.value
    ended = ", ".join(f"{outcome} {count:g}" for outcome, count in sorted(requests.items()) if count)
    lines = ["What users felt so far:", f"  user requests observed: {ended}"]
    for tier, total in deadlines.items():
        if total > 0:
            lines.append(f"  service-level fluidity, {tier} tier: {1 - missed.get(tier, 0) / total:.3f}")
    return lines


async def observed(session: aiohttp.ClientSession, metrics_url: str) -> str | None:
    """/metrics once it counts an observed user request, within ``FIRST_FIGURES_S``; else None."""
    loop = asyncio.get_running_loop()
    end = loop.time() + FIRST_FIGURES_S
    while loop.time() < end:
        async with session.get(metrics_url) as response:
            text = await response.text()
        if 'fluidity_traffic_requests_total{api="chat"' in text:
            return text
        await asyncio.sleep(0.5)
    return None


@contextlib.asynccontextmanager
async def serving(daemon: Daemon, host: str, port: int) -> AsyncIterator[str]:
    """The daemon's web app (which starts and stops it) on ``host:port``; yields its base URL."""
    # /metrics rendered for every request: the demo's few scrapes should show what just happened.
    runner = web.AppRunner(web_app(daemon, metrics_max_age_s=0.0), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        bound_host, bound_port = runner.addresses[0][:2]
        yield f"http://{bound_host}:{bound_port}"
    finally:
        await runner.cleanup()


def banner(where: Addresses) -> str:
    metrics = f"{where.metrics}/metrics"
    return "\n".join(
        [
            "Fluidity Exporter: real traffic through Envoy, beside the probes (Ctrl-C to stop)",
            f"  simulated engine   {where.sim_url}  (model {where.model})",
            f"  Envoy              http://127.0.0.1:{where.envoy_port}  -> the engine; ext_proc in observability "
            f"mode -> the observer at 127.0.0.1:{where.observer_port}",
            f"  user traffic       {USERS_PER_SECOND:g} streaming chat requests/s through Envoy "
            "(the exporter's own probes go to the engine directly)",
            f"  exporter           {metrics}",
            f"See what users feel:  curl -s {metrics} | grep '^fluidity_traffic_'",
        ]
    )


async def demo(args: argparse.Namespace, folder: Path) -> int:
    """Start everything, print where to look, serve until stopped."""
    binary = envoy_binary()  # before anything starts: a missing extra is said at once
    sim = SimServer(SimConfig())
    await sim.start("127.0.0.1", 0)
    try:
        model = sim.resolved.model
        daemon = Daemon(parse_config(daemon_config(sim.url, model, folder / "state")))
        host, _, port = args.listen.rpartition(":")
        async with serving(daemon, host or "127.0.0.1", int(port)) as metrics:
            assert daemon.traffic is not None and daemon.traffic.port is not None
            where = Addresses(metrics, 0, daemon.traffic.port, sim.url, model)
            return await with_envoy(args, binary, folder, where)
    finally:
        await sim.stop()


async def with_envoy(args: argparse.Namespace, binary: Path, folder: Path, where: Addresses) -> int:
    """Envoy in front of the simulator and the users through it, until ``--duration`` or a signal."""
    envoy_port = args.envoy_port or free_port()
    where = Addresses(where.metrics, envoy_port, where.observer_port, where.sim_url, where.model)
    config = folder / "envoy.yaml"
    write_loopback_bootstrap(config, where.sim_url, envoy_port, where.observer_port, free_port())
    envoy = EnvoyProcess(binary, config, folder / "envoy.log")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await envoy.start(envoy_port)
        print(banner(where), flush=True)
        traffic = asyncio.create_task(users(f"http://127.0.0.1:{envoy_port}", where.model, stop))
        async with aiohttp.ClientSession() as session:
            text = await observed(session, f"{where.metrics}/metrics")
        print("\n".join(users_figures(text)) if text else "No user request observed yet.", flush=True)
        print(
            "Serving" + (f" for {args.duration:g} s" if args.duration else " until Ctrl-C") + ".", flush=True
        )
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), args.duration or None)
        stop.set()
        await traffic
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        envoy.stop()
    return EXIT_MEASURED


def run(args: argparse.Namespace) -> int:
    """``demo --traffic``: the exit code; a missing extra or a taken port is a usage error (2)."""
    with tempfile.TemporaryDirectory(prefix="fluidity-demo-") as folder:
        try:
            return asyncio.run(demo(args, Path(folder)))
        except (EnvoyError, SettingsError) as exc:
            print(f"demo --traffic: {exc}", file=sys.stderr)
        except RuntimeError as exc:  # the traffic extra (grpcio) is missing: the daemon says which
            if "traffic" not in str(exc):
                raise
            print(f"demo --traffic: {exc}", file=sys.stderr)
        except OSError as exc:
            print(f"demo --traffic: cannot listen: {exc.strerror or exc}", file=sys.stderr)
    return EXIT_USAGE
