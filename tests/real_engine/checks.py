"""What every real-engine test checks, whatever the engine: a ``bench`` run's report against itself,
the metric core and the engine's own counters; the daemon's re-export of the engine's metrics; and a
request sent on a keep-alive connection that the engine closed while it sat idle.

``run_bench`` reads the engine's ``/metrics`` before and after a ``fluidity-exporter bench`` run (the
real CLI, in-process) so that a test can hold the report against what the engine says it did. The
engine serves nobody else during a test module, so counter increases belong to the run.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporter.app import Daemon
from exporter.cli import main
from exporter.probe.client import ProbeClient
from exporter.settings import load_config_file
from exporter.settings.target import TargetSettings
from exporter.stats.batch import IntervalBatch
from exporter.stats.fluidity import evaluate, fluid_token_rate
from exporter.streams.request import RequestSpec
from exporter.streams.result import Outcome, ProbeResult
from tests.support.daemon import get, serving
from tests.support.daemon import samples as samples_of
from tests.support.measured import assert_capacity_measured, assert_measured

# Small enough that a run takes seconds on 2 cores, varied enough that prompts and outputs differ.
PROMPTS = "uniform:low=16,high=384"
OUTPUTS = "uniform:low=8,high=64"
DEFAULT_PREFILL_DEADLINE_S = 1.0
TIERS_S = {"strict": 0.025, "medium": 0.05, "relaxed": 0.1}
EXACT_SOURCES = ("token_ids", "continuous_usage")  # per-chunk counts from the server


def engine_samples(base_url: str) -> dict[str, float]:
    """The engine's ``/metrics``: every sample name with its values summed over label sets."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as resp:
        text = resp.read().decode("utf-8")
    totals: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] += sample.value
    return dict(totals)


def engine_idle(base_url: str) -> bool:
    """Whether llama-server is running and queueing nothing (its own gauges say so)."""
    samples = engine_samples(base_url)
    return samples["llamacpp:requests_processing"] == 0 and samples["llamacpp:requests_deferred"] == 0


@dataclass(frozen=True)
class BenchRun:
    """A finished ``bench`` run: its report, and the engine's samples around it."""

    summary: dict[str, Any]
    records: list[dict[str, Any]]
    before: dict[str, float]
    after: dict[str, float]

    def increase(self, name: str) -> float:
        """How much the engine's sample ``name`` grew during the run."""
        return self.after[name] - self.before.get(name, 0.0)

    def total(self, field: str) -> float:
        """The sum of a numeric field over the requests."""
        return float(sum(record[field] for record in self.records))


def run_bench(
    base_url: str, api: str, out: Path, *, requests: int, concurrency: int, extra_body: str | None = None
) -> BenchRun:
    """``fluidity-exporter bench`` against ``base_url``; fails the test when it does not exit 0.

    A closed loop of ``concurrency`` (fewer than the engine's slots), not an open rate: on a busy CI
    machine an open 4 req/s outran a starved llama-server (TTFTs of 24-55 s, then timeouts), which says
    nothing about what these tests check (counts, clocks, the report's own arithmetic)."""
    before = engine_samples(base_url)
    flags = ["bench", "--url", base_url, "--api", api, "--requests", str(requests)]
    flags += ["--concurrency", str(concurrency)]
    flags += ["--prompt-tokens", PROMPTS, "--output-tokens", OUTPUTS]
    if extra_body is not None:
        flags += ["--extra-body", extra_body]
    # No calibration requests: the engine's counters must hold the measured load alone.
    code = main([*flags, "--quiet", "--no-calibrate", "--output", str(out)])
    assert_measured(code, out)
    after = engine_samples(base_url)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text(encoding="utf-8").splitlines()]
    return BenchRun(summary, records, before, after)


def check_outcomes_and_tokens(run: BenchRun, requests: int) -> None:
    """Every request completed with exactly the tokens it asked for, counted by us and by the server."""
    assert len(run.records) == requests
    assert run.summary["requests"]["by_outcome"] == {"ok": requests}
    for record in run.records:
        assert record["outcome"] == "ok" and not record["partial"] and record["error"] is None, record
        assert record["finish_reason"] == "length", record
        assert record["output_tokens"] == record["completion_tokens_reported"] == record["max_tokens"], record
        if record["token_source"] in EXACT_SOURCES:
            assert record["token_adjustment"] == 0, record
        else:  # one token per chunk undercounts chunks that carry held-back tokens; usage corrects it
            assert 0 <= record["token_adjustment"] <= record["max_tokens"] // 2, record
        assert len(record["intervals"]) == record["output_tokens"], record
        assert record["prompt_tokens_reported"] > 0, record


def check_timing_plausibility(run: BenchRun) -> None:
    """Every request's timings are consistent with each other and with the wall clock of the run."""
    for record in run.records:
        ttft, e2e, gaps = record["ttft_s"], record["e2e_s"], record["intervals"]
        assert 0 < ttft <= e2e, record
        assert gaps[0] == ttft and all(gap >= 0 for gap in gaps), record
        # The last token arrives before the stream ends, and not long before ([DONE] follows at once).
        assert sum(gaps) <= e2e + 1e-9, record
        assert e2e - sum(gaps) < 0.25, record
    assert max(record["e2e_s"] for record in run.records) <= run.summary["duration_s"] + 1e-6


def check_fluidity_matches_intervals(run: BenchRun) -> None:
    """The summary's fluidity figures are the metric core's, recomputed from the stored intervals."""
    batch = IntervalBatch.from_sequences(record["intervals"] for record in run.records)
    tiers = run.summary["fluidity"]["tiers"]
    for tier, decode_deadline in TIERS_S.items():
        expected = evaluate(batch, DEFAULT_PREFILL_DEADLINE_S, decode_deadline).service_level
        assert tiers[tier]["service_level"] == pytest.approx(expected, abs=1e-12)
    assert run.summary["rates"]["fluid_token_rate"] == pytest.approx(fluid_token_rate(batch), rel=1e-9)


def check_bench(run: BenchRun, requests: int) -> None:
    """The checks every engine's bench run passes."""
    check_outcomes_and_tokens(run, requests)
    check_timing_plausibility(run)
    check_fluidity_matches_intervals(run)


# --- capacity search ------------------------------------------------------------------------------

# 120 requests a trial: with 40 the whole trial is one burst that 8 slots absorb within the prefill
# deadline, and llama-server "passed" anywhere from 55 to 530 req/s; with 120 its searches agree
# (27-37 req/s over 6 runs, vLLM 20 req/s) and take 25-40 s.
SEARCH = "--requests-per-trial 120 --warmup-requests 8 --max-trials 8 --tolerance 0.2 --no-plots"


def run_capacity_search(base_url: str, out: Path, *, start: float) -> dict[str, Any]:
    """A short ``fluidity-exporter capacity`` run (128-token prompts, 32-token answers, the default SLO:
    99% of requests reach fluidity 0.9 at Dd 50 ms); returns its capacity.json."""
    flags = ["capacity", "--url", base_url, "--api", "completions", "--start", str(start)]
    flags += [
        "--prompt-tokens",
        "fixed:128",
        "--output-tokens",
        "fixed:32",
        "--no-calibrate",
        *SEARCH.split(),
    ]
    assert_capacity_measured(main([*flags, "--output", str(out), "--json"]), out)
    result: dict[str, Any] = json.loads((out / "capacity.json").read_text(encoding="utf-8"))
    return result


def check_brackets_a_finite_capacity(result: dict[str, Any]) -> None:
    """The search brackets a finite capacity between the highest load seen to pass and the lowest seen
    to fail, and says how sure it is: a capacity only when ``found`` (both ends' pass-fraction intervals
    clear of the objective), else ``inconclusive`` or ``lower_bound`` (trials ran out) with no capacity.
    At p99 120 requests can never vouch for a pass on their own (367 fluid requests in a row are needed),
    so which state a run reaches depends on the machine; the bracket does not. A trial set aside for
    timings the client distrusted is run again and steers nothing, so the bracket is over the others."""
    steering = [trial for trial in result["trials"] if trial["set_aside"] is None]
    passed = [trial["load"] for trial in steering if trial["passed"]]
    failed = [trial["load"] for trial in steering if not trial["passed"]]
    assert passed and failed and result["bracketed"]
    assert result["lower_bound"] < result["upper_bound"] == min(failed)
    assert result["lower_bound"] == max(load for load in passed if load < result["upper_bound"])
    assert result["state"] in ("found", "inconclusive", "lower_bound")
    assert (result["capacity"] is not None) == (result["state"] == "found")
    if result["state"] == "found":
        ends = result["pass_intervals"]
        assert result["capacity"] == result["lower_bound"]
        assert ends["lower_bound"]["low"] >= 0.99 > ends["upper_bound"]["high"]
    # A passing trial completed every measured request; a failing one was judged, whatever stopped it.
    for trial in result["trials"]:
        figures = trial["figures"]
        if trial["passed"]:
            assert figures["outcomes"] == {"ok": figures["requests"]} and figures["fluid_share"] >= 0.99
        else:
            assert trial["reason"] != "pass" and trial["requests_sent"] > 0
    if result["converged"]:
        assert result["upper_bound"] <= result["lower_bound"] * 1.2 + 1e-9


# --- the daemon ------------------------------------------------------------------------------------

DAEMON_CONFIG = """
global:
  windows: [1m]
  state_dir: {state}
targets:
  - name: {target}
    url: {url}
    api: {api}
    extra_body: {extra_body}
    engine_metrics: {{url: "{url}/metrics", interval: 1s}}
    # The engine's counters must hold the probes alone (engine_counted_our_probes), as bench's
    # --no-calibrate keeps them; the daemon's calibration is tested on the simulator.
    calibrate_prompts: false
modules:
  steady:
    workload: {{prompt_tokens: "uniform:low=32,high=256", output_tokens: "fixed:24"}}
    requests_per_run: 2
    concurrency: 2
    schedule: {{interval: 1s}}
"""
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


# Engine families the daemon exports whatever the engine (about the scrape, not the engine's values).
SCRAPE_FAMILIES = {
    "fluidity_engine_info",
    "fluidity_engine_scrape_success",
    "fluidity_engine_scrape_duration_seconds",
}


def reexported(samples: Samples) -> set[str]:
    """The engine's values the daemon re-exports (sample names, window quantiles included).

    A window percentile counts under its own name whether it was measured or only bounded
    (``..._bound_seconds``): which one a real engine's buckets give depends on the traffic (vLLM's queue
    time of a lightly loaded engine lies in its first bucket, 0.3 s).
    """
    names = {
        name.replace("_bound_seconds", "_seconds")
        for name, _ in samples
        if name.startswith("fluidity_engine_")
    }
    return names - SCRAPE_FAMILIES


def failed_probes(samples: Samples) -> float:
    """Probe requests the daemon counted with any outcome but ok."""
    return sum(
        count
        for (name, labels), count in samples.items()
        if name == "fluidity_probe_requests_total" and ("outcome", "ok") not in labels
    )


@asynccontextmanager
async def running_daemon(
    base_url: str, api: str, folder: Path, target: str, extra_body: str = "{}"
) -> AsyncIterator[str]:
    """The daemon probing ``base_url`` every second and scraping its engine metrics (kind detected);
    yields the daemon's own base URL."""
    config = folder / "config.yaml"
    text = DAEMON_CONFIG.format(
        state=folder / "state", target=target, url=base_url, api=api, extra_body=extra_body
    )
    config.write_text(text)
    daemon = Daemon(load_config_file(config), config_path=str(config), seed=1)
    async with serving(daemon) as url:
        yield url


async def daemon_samples(url: str) -> Samples:
    status, text = await get(url + "/metrics")
    assert status == 200
    return samples_of(text)


async def wait_for_samples(url: str, condition: Callable[[Samples], bool], timeout: float = 60.0) -> Samples:
    """The daemon's samples once ``condition`` holds for them; fails the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        samples = await daemon_samples(url)
        if condition(samples):
            return samples
        assert time.monotonic() < deadline, "timed out waiting for the daemon's metrics"
        await asyncio.sleep(0.5)


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def engine_counted_our_probes(target: str, base: float, probes: int) -> Callable[[Samples], bool]:
    """A condition on the daemon's samples: ``probes`` probe requests succeeded, and the engine's
    generation counter, as the daemon re-exports it, grew from ``base`` by exactly the tokens those
    probes received (so it was scraped after the last of them ended: engines count at the end)."""
    series = {"target": target, "module": "steady"}

    def holds(samples: Samples) -> bool:
        ok = value(samples, "fluidity_probe_requests_total", **series, outcome="ok") or 0
        generated = value(samples, "fluidity_engine_generation_tokens_total", target=target)
        received = value(samples, "fluidity_probe_output_tokens_total", **series)
        return ok >= probes and generated is not None and generated - base == received

    return holds


# --- keep-alive ------------------------------------------------------------------------------------

KEEP_ALIVE_S = 5.0  # llama.cpp's (cpp-httplib) and vLLM's (uvicorn) idle keep-alive timeout


def idle_connection_closed_after(base_url: str, limit: float = 10.0) -> float:
    """Seconds after which the server closes an idle keep-alive connection (it answers one GET first)."""
    parts = urllib.parse.urlsplit(base_url)
    with socket.create_connection((parts.hostname, parts.port), timeout=limit) as sock:
        sock.sendall(f"GET /health HTTP/1.1\r\nHost: {parts.netloc}\r\n\r\n".encode())
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        while sock.recv(65536):  # the rest of the answer, then the close (b"")
            pass
        return time.monotonic() - started


async def request_after_server_closed_idle_connection(
    base_url: str, api: str, *, kernel_stamps: bool = True
) -> tuple[ProbeResult, ProbeResult]:
    """Two requests on one client, the second sent on the keep-alive connection of the first after
    the server closed it.

    The event loop is blocked (``time.sleep``) across the server's keep-alive timeout, so the server's
    FIN is waiting unread when the second request takes the pooled connection. On the loop's own
    transports (``kernel_stamps=False``: TLS targets) the connection still looks open and the request
    is written to it: what a daemon whose loop is busy at the wrong moment meets (one request in 32
    with vLLM's own benchmark client against llama.cpp); blocking makes it certain. A kernel-stamped
    connection is read once more before the pool hands it out, so the FIN is seen first."""
    settings = TargetSettings(base_url, api=api)  # type: ignore[arg-type]
    async with ProbeClient(settings, monitor_lag=False, kernel_stamps=kernel_stamps) as client:
        first = await client.send(RequestSpec(prompt="keep alive one", max_tokens=8))
        time.sleep(KEEP_ALIVE_S + 0.5)  # deliberately blocking: see the docstring
        second = await client.send(RequestSpec(prompt="keep alive two", max_tokens=8))
    return first, second


def check_resent_on_fresh_connection(first: ProbeResult, second: ProbeResult, *, stale: bool = True) -> None:
    """``stale``: the second request met the closed connection and had to be resent. Without it (the
    client saw the close before it reused the connection: llama.cpp's server closes it right after a
    streamed answer, and a kernel-stamped connection is read before reuse) the second request goes out
    on a fresh one at once: no resend, and no failure either way."""
    assert first.outcome is Outcome.OK and first.retries == 0, first.error
    assert second.outcome is Outcome.OK, second.error
    # It failed on the stale connection and was resent, and that is counted.
    assert second.retries == (1 if stale else 0)
    assert second.output_tokens == 8
