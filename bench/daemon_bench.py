"""Benchmark of the daemon: idle memory and CPU, and /metrics latency with 10 targets x 3 modules.

Run: ``python bench/daemon_bench.py [--idle-seconds 40] [--scrapes 300]``. Starts the simulator in a
child process and ``fluidity-exporter run`` in another, both on loopback, and prints:

* idle RSS (MB) and CPU (% of one core) of the daemon probing one target at one probe per 10 s
  (goals: <= 80 MB, <= 1% CPU); as a baseline from the same run, the RSS of a bare Python process that
  imports the same libraries;
* /metrics latency (p50/p99 ms over ``--scrapes`` scrapes) with 10 targets x 3 modules, each probed every
  10 s, after their
  windows have filled (goal: p99 <= 10 ms), beside a bare prometheus_client exposition of the same size
  in the same run as the baseline.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

from exporter.sim.process import SimProcess

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def config_text(sim_url: str, targets: int, modules: int, interval: str, engine: bool) -> str:
    lines = ["global: {windows: [5m, 1h]}", "targets:"]
    for t in range(targets):
        lines.append(f"  - {{name: t{t}, url: '{sim_url}', api: completions, simulated: true")
        lines.append(
            f"     , engine_metrics: {{url: '{sim_url}/metrics', interval: 15s}}}}" if engine else "    }"
        )
    lines.append("modules:")
    for m in range(modules):
        lines.append(f"  m{m}:")
        lines.append("    workload: {prompt_tokens: 'fixed:128', output_tokens: 'fixed:32'}")
        lines.append(f"    requests_per_run: 1\n    schedule: {{interval: {interval}}}")
    return "\n".join(lines) + "\n"


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_daemon(config: Path, port: int) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "exporter", "run", f"--config.file={config}"]
    command += [f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1).read()
            return process
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("the daemon did not become ready")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def baseline_rss_mb() -> float:
    """A bare interpreter importing the same libraries: what the daemon costs beyond them."""
    code = (
        "import aiohttp, numpy, prometheus_client, apscheduler, yaml, os;"
        "print(open(f'/proc/{os.getpid()}/status').read())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    line = next(line for line in out.splitlines() if line.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def daemon_for(workdir: Path, name: str, text: str) -> tuple[subprocess.Popen[bytes], int]:
    """A ready daemon on a free port running the config ``text``."""
    config = workdir / f"{name}.yaml"
    config.write_text(text)
    port = free_port()
    return start_daemon(config, port), port


def idle(sim_url: str, seconds: float, workdir: Path) -> None:
    daemon, _ = daemon_for(workdir, "idle", config_text(sim_url, 1, 1, "10s", engine=True))
    try:
        time.sleep(5)  # start-up and the first probe are not idle
        before, start = cpu_seconds(daemon.pid), time.monotonic()
        time.sleep(seconds)
        used, elapsed = cpu_seconds(daemon.pid) - before, time.monotonic() - start
        rss = rss_mb(daemon.pid)
    finally:
        daemon.terminate()
        daemon.wait(timeout=15)
    print(f"idle, 1 target x 1 module at one probe per 10 s, over {elapsed:.0f} s:")
    print(
        f"  RSS {rss:.1f} MB   (goal <= 80 MB; bare interpreter with the same imports: {baseline_rss_mb():.1f} MB)"
    )
    print(f"  CPU {100 * used / elapsed:.2f}% of one core   (goal <= 1%)")


def scrape_latencies(url: str, count: int) -> np.ndarray:
    times = []
    for _ in range(count):
        start = time.perf_counter()
        body = urllib.request.urlopen(url, timeout=5).read()
        times.append(time.perf_counter() - start)
    lines = body.count(b"\n")
    print(f"  exposition size {len(body) / 1024:.0f} KiB, {lines} lines")
    return np.array(times) * 1e3


def baseline_server(lines: int) -> tuple[subprocess.Popen[bytes], int]:
    """A bare prometheus_client HTTP server exposing about as many series (the same run's baseline)."""
    port = free_port()
    code = (
        "import time, prometheus_client as p\n"
        f"g = p.Gauge('bench_series', 'x', ['i'])\n"
        f"[g.labels(str(i)).set(i) for i in range({lines})]\n"
        f"p.start_http_server({port}, addr='127.0.0.1')\n"
        "time.sleep(3600)\n"
    )
    process = subprocess.Popen([sys.executable, "-c", code])
    time.sleep(1.5)
    return process, port


def metrics_latency(sim_url: str, scrapes: int, workdir: Path) -> None:
    daemon, port = daemon_for(workdir, "busy", config_text(sim_url, 10, 3, "10s", engine=True))
    try:
        time.sleep(15)  # every (target, module) has run and the engines were scraped
        print("/metrics with 10 targets x 3 modules (each probed every 10 s while scraping):")
        ours = scrape_latencies(f"http://127.0.0.1:{port}/metrics", scrapes)
        lines = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().count(b"\n")
    finally:
        daemon.terminate()
        daemon.wait(timeout=15)
    print(
        f"  fluidity-exporter: p50 {np.percentile(ours, 50):.2f} ms, p99 {np.percentile(ours, 99):.2f} ms   (goal p99 <= 10 ms)"
    )
    server, base_port = baseline_server(lines // 3)
    try:
        print("bare prometheus_client exposition of a similar size (baseline):")
        base = scrape_latencies(f"http://127.0.0.1:{base_port}/metrics", scrapes)
    finally:
        server.terminate()
        server.wait(timeout=5)
    print(f"  baseline: p50 {np.percentile(base, 50):.2f} ms, p99 {np.percentile(base, 99):.2f} ms")
    print(f"  ratio ours / baseline: p50 {np.percentile(ours, 50) / np.percentile(base, 50):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--idle-seconds", type=float, default=40.0)
    parser.add_argument("--scrapes", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, SimProcess(["--sim-preset", "tiny"]) as sim:
        idle(sim.url, args.idle_seconds, Path(tmp))
        metrics_latency(sim.url, args.scrapes, Path(tmp))


if __name__ == "__main__":
    main()
