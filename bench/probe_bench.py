"""Accuracy and CPU of the measuring client against ground truth, beside a plain aiohttp client.

The server is ``bench/truth_server.py`` on the first CPU: scripted streams of 64 one-token chunks 20 ms
apart (``--tokens``: another length; ``--gap-ms``: another gap), every chunk's write stamped on CLOCK_MONOTONIC and logged. Each
client runs in a process of its own on the other CPU(s), in a closed loop (``streams`` users, each
sending its next request when the last one ended, ``--requests`` each), and stamps every token it reads
on the same clock. Per token, the
client's stamp minus the server's write stamp is that token's delivery lateness ``d``; the inter-token
error of a gap is ``d_i - d_(i-1)`` (what the client's measured gap gets wrong) and the TTFT error is
``d_0``. Clients:

* ``plain``: a vLLM ``bench serve``-style client, the baseline: one aiohttp session, ``iter_any``, split on
  blank lines, ``json.loads``, one ``perf_counter`` per chunk, asyncio's standard event loop;
* ``probe``: ``ProbeClient`` as it runs by default: uvloop, plain-TCP reads stamped by the kernel on
  arrival and read in paced batches (``exporter/probe/stamped.py``);
* ``probe/read-stamps``: ``ProbeClient`` on the loop's own transports, each read stamped when the loop
  gets to it (what TLS connections and other platforms get);
* ``probe/asyncio``: ``ProbeClient`` on asyncio's standard loop, to show what the loop alone is worth;
* ``floor`` (only with ``--clients``): raw protocols on uvloop that parse nothing (one stamp per read,
  its tokens counted by a byte search): about the least CPU a Python client can spend per chunk here;
* ``floor/stamped`` (only with ``--clients``): the same on the probe's own stamped, paced sockets (in C
  where ``_reads.c`` was built): what our reading costs before any parsing.

Every load runs each client ``--reps`` times, interleaved (the order rotates: this VM is noisy), and the
table shows the median of the runs' figures; the ratios against ``plain`` are computed per repetition and
their median printed. Client CPU is the client process's CPU time (user + system) from the first request
to the last result over the chunks it read; process start-up (interpreter, imports, event loop) is
excluded and shown apart. ``(kernel)`` is the part of it spent in the kernel (system time: ``recvmsg``,
the ACK each read sends and, on loopback, that ACK's delivery to the server's socket, ``epoll``): about
the same for every client. A request's own work (its head and tail, timers, result) is spread over its
chunks; ``--tokens 256`` shows what a chunk costs with less of it. ``flagged`` is the share of requests
the client's saturation detector marked unreliable; its precision is judged against the truth: a
request is *really off* when one of its gaps is wrong by more than ``OFF_MS`` (5 ms). A gap one of
whose write stamps is unsure (the server was preempted between stamping a chunk and writing it:
``truth_server.py``) has no truth to judge by: it is left out of every figure and counted in the
detector's line.

Usage: ``python bench/probe_bench.py [--quick] [--loads 100,300] [--reps 3] [--requests 3] [--tokens 64] [--gap-ms 20]
[--synchronized]``. The default run takes about 5 minutes; ``--quick`` about one and a half.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TOKENS = int(os.environ.get("PROBE_BENCH_TOKENS", "64"))  # set by --tokens, for the clients
GAP_S = float(os.environ.get("PROBE_BENCH_GAP_MS", "20")) / 1e3  # set by --gap-ms, for the clients
FIRST_TTFT_S = 1.0  # the first request of every user: all connections are up before tokens flow
TTFT_S = 0.05
OFF_MS = 5.0
COALESCED_S = 0.001
CLIENTS = ("plain", "probe", "probe/read-stamps", "probe/asyncio")
LOADS = (100, 300)


# -- inside a client process -------------------------------------------------------------------------

CpuTimes = tuple[float, float]  # (user, system) seconds of this process


def cpu_times() -> CpuTimes:
    """This process's CPU time so far, in user space and in the kernel."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


def cpu_since(start: CpuTimes) -> CpuTimes:
    user, system = cpu_times()
    return user - start[0], system - start[1]


def truth(user: int, round_: int, streams: int) -> dict[str, Any]:
    """The script of one request. Users' phases are spread evenly over one gap; in the steady state
    (the default) their first requests also start spread over one stream's length, so streams end (and
    the next ones start) evenly over time, as in a closed loop that has run for a while with varied
    lengths; ``SYNCHRONIZED`` starts them together, so all of them end within one gap of each other."""
    phase = GAP_S * user / streams
    if round_ > 0:
        return {"id": f"{user}-{round_}", "ttft": TTFT_S + phase, "gap": GAP_S}
    spread = 0.0 if SYNCHRONIZED else TOKENS * GAP_S * user / streams
    return {"id": f"{user}-{round_}", "ttft": FIRST_TTFT_S + spread + phase, "gap": GAP_S}


SYNCHRONIZED = os.environ.get("PROBE_BENCH_SYNCHRONIZED") == "1"  # set by --synchronized, for the clients


async def plain_request(session: Any, url: str, body: dict[str, Any]) -> tuple[float, list[float]]:
    """vLLM ``bench serve``-style: ``perf_counter`` per parsed content chunk."""
    stamps: list[float] = []
    buffer = ""
    sent = time.perf_counter()
    async with session.post(url + "/v1/completions", json=body) as response:
        if response.status != 200:
            raise RuntimeError(f"plain: HTTP {response.status}")
        async for chunk_bytes in response.content.iter_any():
            buffer += chunk_bytes.decode("utf-8")
            *messages, buffer = buffer.split("\n\n")
            for message in messages:
                data = message.strip().removeprefix("data: ")
                if not data or data == "[DONE]":
                    continue
                choices = json.loads(data).get("choices")
                if choices and choices[0].get("text"):
                    stamps.append(time.perf_counter())
    return sent, stamps


async def run_plain(url: str, streams: int, requests: int) -> tuple[list[dict[str, Any]], CpuTimes]:
    import aiohttp

    records: list[dict[str, Any]] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=300)
    ) as session:

        async def user(index: int) -> None:
            for round_ in range(requests):
                script = truth(index, round_, streams)
                body = {
                    "model": "truth",
                    "prompt": "x",
                    "max_tokens": TOKENS,
                    "stream": True,
                    "truth": script,
                }
                sent, stamps = await plain_request(session, url, body)
                records.append({"id": script["id"], "sent": sent, "stamps": stamps, "flagged": None})

        cpu = cpu_times()
        await asyncio.gather(*(user(i) for i in range(streams)))
        return records, cpu_since(cpu)


async def run_probe(
    url: str, streams: int, requests: int, *, kernel_stamps: bool = True
) -> tuple[list[dict[str, Any]], CpuTimes]:
    from exporter.probe import ProbeClient, ProbeResult, RequestSpec, TargetSettings, Timeouts

    settings = TargetSettings(
        base_url=url,
        api="completions",
        model="truth",
        ignore_eos=False,
        send_min_tokens=False,
        request_token_ids=False,
        request_continuous_usage=False,
        timeouts=Timeouts(connect=10.0, ttft=30.0, idle=10.0, total=120.0),
    )
    results: list[tuple[str, ProbeResult]] = []
    async with ProbeClient(settings, kernel_stamps=kernel_stamps) as client:

        async def user(index: int) -> None:
            for round_ in range(requests):
                script = truth(index, round_, streams)
                spec = RequestSpec(prompt="x", max_tokens=TOKENS, extra_body=(("truth", script),))
                results.append((script["id"], await client.send(spec)))

        cpu = cpu_times()
        await asyncio.gather(*(user(i) for i in range(streams)))
        spent = cpu_since(cpu)
    # One stamp per token, for the judging: the bench's own bookkeeping, once the client's CPU was read.
    records = [
        {
            "id": request_id,
            "sent": result.sent_at,
            "stamps": [
                t for t, n in zip(result.token_times, result.token_counts, strict=True) for _ in range(n)
            ],
            "flagged": result.unreliable,
            "doubtful": result.doubtful_gaps,
        }
        for request_id, result in results
    ]
    return records, spent


async def run_read_stamps(url: str, streams: int, requests: int) -> tuple[list[dict[str, Any]], CpuTimes]:
    """``ProbeClient`` with the event loop's transports: each read stamped when the loop gets to it."""
    return await run_probe(url, streams, requests, kernel_stamps=False)


class _FloorProtocol(asyncio.Protocol):
    """A connection that parses nothing: one stamp per read, the end found by the final 0-chunk."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.stamps: list[float] = []
        self.done: asyncio.Future[None] | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.received(time.perf_counter(), data)

    def received(self, now: float, data: bytes) -> None:
        """One read, stamped ``now`` (the stamped sockets call this directly, with their stamp)."""
        self.stamps.extend([now] * data.count(b'"text":" tok"'))
        if data.endswith(b"0\r\n\r\n") and self.done is not None and not self.done.done():
            self.done.set_result(None)


async def run_floor(url: str, streams: int, requests: int) -> tuple[list[dict[str, Any]], CpuTimes]:
    """The physical reference: raw protocols on uvloop that parse nothing (one read = one chunk here)."""
    host, port = url.removeprefix("http://").split(":")
    loop = asyncio.get_running_loop()

    async def connect() -> Any:
        return (await loop.create_connection(_FloorProtocol, host, int(port)))[1]

    return await _floor_users(host, connect, streams, requests)


async def _floor_users(
    host: str, connect: Callable[[], Awaitable[Any]], streams: int, requests: int
) -> tuple[list[dict[str, Any]], CpuTimes]:
    """The closed loop of the floor clients: each user connects (``connect``), then sends its requests."""
    loop = asyncio.get_running_loop()
    records: list[dict[str, Any]] = []

    async def user(index: int) -> None:
        proto = await connect()
        for round_ in range(requests):
            script = truth(index, round_, streams)
            body = json.dumps(
                {"model": "truth", "prompt": "x", "max_tokens": TOKENS, "truth": script}
            ).encode()
            proto.stamps, proto.done = [], loop.create_future()
            head = f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(body)}\r\n\r\n"
            proto.transport.write(head.encode() + body)
            await proto.done
            records.append({"id": script["id"], "sent": 0.0, "stamps": proto.stamps, "flagged": None})
        proto.transport.close()

    cpu = cpu_times()
    await asyncio.gather(*(user(i) for i in range(streams)))
    return records, cpu_since(cpu)


async def run_floor_stamped(url: str, streams: int, requests: int) -> tuple[list[dict[str, Any]], CpuTimes]:
    """The floor of our own reading: the probe's stamped sockets, parsing nothing."""
    from exporter.probe.stamped import open_stamped

    host, port = url.removeprefix("http://").split(":")

    async def connect() -> Any:
        protocol = _FloorProtocol()
        await open_stamped(host, int(port), protocol, time.perf_counter)
        return protocol

    return await _floor_users(host, connect, streams, requests)


def client_main(client: str, url: str, streams: int, requests: int, out: str, cpus: str) -> None:
    """One client run in this process; writes its records and costs to ``out`` as JSON."""
    os.sched_setaffinity(0, {int(c) for c in cpus.split(",")})
    import gc

    from exporter.probe.loop import run as run_on_loop

    run = {
        "plain": run_plain,
        "floor": run_floor,
        "floor/stamped": run_floor_stamped,
        "probe/read-stamps": run_read_stamps,
    }.get(client, run_probe)
    loop = "asyncio" if client in ("plain", "probe/asyncio") else "uvloop"

    async def main() -> tuple[list[dict[str, Any]], CpuTimes, float]:
        ready = time.perf_counter()  # CLOCK_MONOTONIC: the parent's launch stamp is on the same clock
        gc.freeze()  # what start-up allocated stays out of the collector's way
        records, cpu = await run(url, streams, requests)
        return records, cpu, ready

    records, cpu, ready = run_on_loop(main(), loop=loop)
    data = {"records": records, "cpu_s": sum(cpu), "kernel_s": cpu[1], "ready_at": ready}
    Path(out).write_text(json.dumps(data))


# -- in the parent -----------------------------------------------------------------------------------


@dataclass
class Run:
    """One client at one load: its figures against the truth."""

    client: str
    streams: int
    itl_errors: list[float] = field(default_factory=list)  # seconds, signed
    ttft_errors: list[float] = field(default_factory=list)
    chunks: int = 0
    coalesced: int = 0
    gaps: int = 0
    cpu_s: float = 0.0
    kernel_s: float = 0.0  # of cpu_s, in the kernel (system time)
    startup_s: float = 0.0
    mismatched: int = 0  # requests whose token count differs from the server's
    unsure_gaps: int = 0  # gaps left out: a write stamp of theirs is unsure (truth_server.py)
    flagged: list[bool] = field(default_factory=list)
    off: list[bool] = field(default_factory=list)
    doubtful_gaps: int | None = None  # of the flagged requests' gaps, those the client says may be wrong
    off_gaps_flagged: int = 0  # gaps really wrong by more than OFF_MS, in flagged requests
    off_gaps_unflagged: int = 0  # ... in requests not flagged: what the doubtful count cannot see

    def figures(self) -> dict[str, float]:
        abs_itl = sorted(abs(e) for e in self.itl_errors)
        itl = sorted(self.itl_errors)
        ttft = sorted(abs(e) for e in self.ttft_errors)
        flagged = [f for f in self.flagged if f is not None]
        return {
            "itl_p50": pct(itl, 50) * 1e3,
            "itl_abs_p99": pct(abs_itl, 99) * 1e3,
            "itl_abs_p999": pct(abs_itl, 99.9) * 1e3,
            "ttft_p99": pct(ttft, 99) * 1e3,
            "coalesced": self.coalesced / max(self.gaps, 1),
            "us_per_chunk": self.cpu_s / max(self.chunks, 1) * 1e6,
            "kernel_us_per_chunk": self.kernel_s / max(self.chunks, 1) * 1e6,
            "chunks_per_cpu_s": self.chunks / self.cpu_s if self.cpu_s > 0 else math.nan,
            "flagged": sum(flagged) / len(flagged) if flagged else math.nan,
            "startup_s": self.startup_s,
            "mismatched": float(self.mismatched),
        }


# The truth server's log: each request's write stamps, and the chunks whose stamps are unsure.
Truth = tuple[dict[str, list[float]], dict[str, list[int]]]


def pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    return values[min(len(values) - 1, int(q / 100 * len(values)))]


def judge(client: str, streams: int, data: dict[str, Any], truth: Truth, launched: float) -> Run:
    run = Run(
        client, streams, cpu_s=data["cpu_s"], kernel_s=data["kernel_s"], startup_s=data["ready_at"] - launched
    )
    written_by_id, unsure_by_id = truth
    for record in data["records"]:
        written, stamps = written_by_id.get(record["id"], []), record["stamps"]
        if len(written) != len(stamps) or not stamps:
            run.mismatched += 1
            continue
        unsure = set(unsure_by_id.get(record["id"], ()))
        sure = [i for i in range(len(stamps) - 1) if i not in unsure and i + 1 not in unsure]
        lateness = [c - s for c, s in zip(stamps, written, strict=True)]
        errors = [lateness[i + 1] - lateness[i] for i in sure]
        if 0 not in unsure:
            run.ttft_errors.append(lateness[0])
        run.itl_errors.extend(errors)
        run.chunks += len(stamps)
        run.gaps += len(errors)
        run.unsure_gaps += len(stamps) - 1 - len(sure)
        measured = [stamps[i + 1] - stamps[i] for i in sure]
        true = [written[i + 1] - written[i] for i in sure]
        run.coalesced += sum(m < COALESCED_S <= t / 10 for m, t in zip(measured, true, strict=True))
        off = sum(abs(e) * 1e3 > OFF_MS for e in errors)  # gaps wrong by more than OFF_MS
        run.flagged.append(record["flagged"])
        run.off.append(off > 0)
        if record.get("doubtful") is not None:
            run.doubtful_gaps = (run.doubtful_gaps or 0) + record["doubtful"]
        if record["flagged"]:
            run.off_gaps_flagged += off
        else:
            run.off_gaps_unflagged += off
    return run


def start_server(cpu: int | None) -> tuple[subprocess.Popen[str], str]:
    command = [sys.executable, str(HERE / "truth_server.py")]
    if cpu is not None:
        command += ["--cpu", str(cpu)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        proc.kill()
        raise RuntimeError(f"the truth server did not start: {line!r}")
    return proc, f"http://127.0.0.1:{line.split()[1]}"


def fetch_log(url: str) -> Truth:
    import urllib.request

    with urllib.request.urlopen(url + "/log", timeout=30) as response:
        log = json.loads(response.read())
    return log["written"], log["unsure"]


def measure(client: str, url: str, streams: int, requests: int, client_cpus: str) -> Run:
    fetch_log(url)  # clear
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [sys.executable, __file__, "--client-run", client, "--url", url, "--streams", str(streams)]
        command += ["--requests", str(requests), "--out", out.name, "--cpus", client_cpus]
        launched = time.perf_counter()
        subprocess.run(command, check=True, timeout=600)
        data = json.loads(Path(out.name).read_text())
    return judge(client, streams, data, fetch_log(url), launched)


HEADER = (
    "streams  client          ITL err p50   |ITL err| p99 / p99.9   |TTFT err| p99   coalesced"
    "   us/chunk  (kernel)  chunks/cpu-s  flagged  start-up\n"
    "                                 (ms)          (ms)                   (ms)                "
    "                                                   (s)"
)


def row(streams: int, client: str, f: dict[str, float]) -> str:
    flagged = "   n/a" if math.isnan(f["flagged"]) else f"{f['flagged']:6.1%}"
    return (
        f"{streams:6d}  {client:14s} {f['itl_p50']:8.3f}      {f['itl_abs_p99']:8.3f} / {f['itl_abs_p999']:8.3f}"
        f"       {f['ttft_p99']:8.3f}     {f['coalesced']:7.2%}   {f['us_per_chunk']:7.1f}   {f['kernel_us_per_chunk']:7.1f}   "
        f"{f['chunks_per_cpu_s']:10,.0f}   {flagged}   {f['startup_s']:6.2f}"
    )


def detector(runs: list[Run]) -> str:
    pairs = [(f, o) for r in runs for f, o in zip(r.flagged, r.off, strict=True) if f is not None]
    tp = sum(f and o for f, o in pairs)
    fp = sum(f and not o for f, o in pairs)
    fn = sum(o and not f for f, o in pairs)
    tn = len(pairs) - tp - fp - fn
    precision = tp / (tp + fp) if tp + fp else math.nan
    recall = tp / (tp + fn) if tp + fn else math.nan
    unsure = sum(r.unsure_gaps for r in runs)
    return (
        f"flagged & really off {tp}, flagged & fine {fp}, unflagged & off {fn}, unflagged & fine {tn}; "
        f"precision {precision:.0%}, recall {recall:.0%} (off: a gap wrong by > {OFF_MS:g} ms; "
        f"{unsure} gaps without a sure truth left out){_doubted(runs)}"
    )


def _doubted(runs: list[Run]) -> str:
    """The client's count of the gaps its flags concern against the truth's: gaps really off in the
    flagged requests (what the count should match) and in the others (what it cannot see). The client's
    count is over every chunk's gap, the first from the send; the truth's over the inter-token gaps
    with sure write stamps: nearly the same set, not quite."""
    from exporter.load.health import HealthThresholds

    counts = [r.doubtful_gaps for r in runs if r.doubtful_gaps is not None]
    if not counts:
        return ""
    chunks, gaps = sum(r.chunks for r in runs) or 1, sum(r.gaps for r in runs) or 1
    flagged_off, unflagged_off = (
        sum(r.off_gaps_flagged for r in runs),
        sum(r.off_gaps_unflagged for r in runs),
    )
    return (
        f"; gaps the client doubts {sum(counts) / chunks:.3%}, really off {flagged_off / gaps:.3%} in "
        f"flagged requests and {unflagged_off / gaps:.3%} in the others (doubtful_gaps' limit: "
        f"{HealthThresholds().max_doubtful_gap_share:.1%})"
    )


def compare(reps: list[dict[str, Run]], client: str) -> str:
    def ratio(name: str) -> float:
        values = []
        for rep in reps:
            base, ours = rep["plain"].figures()[name], rep[client].figures()[name]
            if base > 0 and not math.isnan(ours):
                values.append(ours / base)
        return statistics.median(values) if values else math.nan

    return (
        f"  {client:14s} / plain: CPU per chunk {ratio('us_per_chunk'):.3f}x (goal <= 0.333x), "
        f"|ITL err| p99 {ratio('itl_abs_p99'):.2f}x, p99.9 {ratio('itl_abs_p999'):.2f}x, "
        f"|TTFT err| p99 {ratio('ttft_p99'):.2f}x (goals <= 1.00x)"
    )


def median_figures(runs: list[Run]) -> dict[str, float]:
    figures = [r.figures() for r in runs]
    return {k: statistics.median(f[k] for f in figures) for k in figures[0]}


def streams_for_clients(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[int, float]:
    """The streams' tokens and gap (ms), checked and handed to the client processes (they inherit the
    environment)."""
    if args.synchronized:
        os.environ["PROBE_BENCH_SYNCHRONIZED"] = "1"
    tokens = TOKENS if args.tokens is None else args.tokens
    if tokens < 2:
        parser.error(f"--tokens must be at least 2 (one gap to judge), not {tokens}")
    os.environ["PROBE_BENCH_TOKENS"] = str(tokens)
    gap_ms = GAP_S * 1e3 if args.gap_ms is None else args.gap_ms
    if not 2.0 <= gap_ms <= 1000.0:
        parser.error(f"--gap-ms must be between 2 and 1000 ms, not {gap_ms:g}")
    os.environ["PROBE_BENCH_GAP_MS"] = str(gap_ms)
    return tokens, gap_ms


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one repetition, 2 requests per user")
    parser.add_argument("--loads", default=None, help="concurrent streams, comma-separated (default 100,300)")
    parser.add_argument("--reps", type=int, help="repetitions per load (default 3; quick 1)")
    parser.add_argument("--requests", type=int, help="requests per user (default 3; quick 2)")
    parser.add_argument("--clients", default=",".join(CLIENTS), help="which clients, comma-separated")
    parser.add_argument(
        "--tokens",
        type=int,
        help=f"tokens per stream (default {TOKENS}); more spreads each request's own work over more chunks",
    )
    parser.add_argument(
        "--gap-ms",
        type=float,
        help=f"the gap between a stream's chunks (default {GAP_S * 1e3:g} ms); 12-16 ms tests the paced "
        "reads' slack at 60-80 tokens a second",
    )
    parser.add_argument(
        "--synchronized",
        action="store_true",
        help="start every user at once: all streams end within one gap (a stress case for end-of-stream work)",
    )
    parser.add_argument("--client-run", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--streams", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--cpus", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client_run:
        client_main(args.client_run, args.url, args.streams, args.requests, args.out, args.cpus)
        return 0
    reps = args.reps or (1 if args.quick else 3)
    requests = args.requests or (2 if args.quick else 3)
    loads = tuple(int(x) for x in args.loads.split(",")) if args.loads else LOADS
    clients = tuple(args.clients.split(","))
    tokens, gap_ms = streams_for_clients(parser, args)
    cpus = sorted(os.sched_getaffinity(0))
    server_cpu = cpus[0] if len(cpus) > 1 else None
    client_cpus = ",".join(str(c) for c in (cpus[1:] if len(cpus) > 1 else cpus))
    server, url = start_server(server_cpu)
    try:
        print(
            f"truth server at {url} on CPU {server_cpu}; clients on CPU(s) {client_cpus}; {tokens} tokens per "
            f"request, {gap_ms:g} ms gaps, closed loop ({'synchronized' if args.synchronized else 'steady state'}), "
            f"{requests} requests per user, {reps} rep(s); "
            f"load average before: {', '.join(f'{x:.2f}' for x in os.getloadavg())}\n"
        )
        print(HEADER)
        for streams in loads:
            per_rep: list[dict[str, Run]] = []
            for rep in range(reps):
                order = clients[rep % len(clients) :] + clients[: rep % len(clients)]
                per_rep.append({c: measure(c, url, streams, requests, client_cpus) for c in order})
            for client in clients:
                print(row(streams, client, median_figures([r[client] for r in per_rep])), flush=True)
            if "plain" in clients:
                for client in clients[1:]:
                    print(compare(per_rep, client))
            for client in clients:
                if client != "plain":
                    print(f"  detector ({client}): {detector([r[client] for r in per_rep])}")
            print()
    finally:
        server.terminate()
        server.wait(timeout=10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
