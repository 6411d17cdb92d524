"""The daemon end to end: it probes the simulator on a fast schedule over real sockets, and /metrics,
/probe, reload, promtool and a real Prometheus server all see what exporter.stats says they should."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import urllib.parse
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from exporter.app import Daemon
from exporter.settings import load_config_file
from exporter.stats.batch import IntervalBatch
from exporter.stats.fluidity import evaluate
from exporter.streams.result import ProbeResult, intervals
from tests.support.daemon import get, samples, serving, value
from tests.support.gateway import fake_gateway
from tests.support.net import free_port
from tests.support.wait import wait_for

CONFIG = """
global:
  windows: [1m, 5m]
targets:
  - name: sim
    url: {url}
    api: completions
    simulated: true
    engine_metrics: {{url: "{url}/metrics", kind: vllm, interval: 1s}}
modules:
  fast:
    workload: {{prompt_tokens: "uniform:low=32,high=128", output_tokens: "fixed:24"}}
    requests_per_run: 2
    concurrency: 2
    schedule: {{interval: 1s}}
{extra_module}
slos:
  default:
    prefill: {{deadline: 1s}}
    objectives: ["ttft:p99<=5"]
    goodput: {{ttft: 5s}}
"""
SECOND_MODULE = """  slow:
    workload: {prompt_tokens: "fixed:64", output_tokens: "fixed:8"}
    requests_per_run: 1
    schedule: {interval: 1h}
"""


class Spy:
    """Keeps every run the daemon stores, to recompute the expected figures with exporter.stats."""

    def __init__(self, add: Callable[..., None]) -> None:
        self.add = add
        self.runs: list[tuple[str, str, list[ProbeResult]]] = []

    def __call__(
        self, target: str, module: str, results: list[ProbeResult], *args: Any, **kwargs: Any
    ) -> None:
        self.runs.append((target, module, list(results)))
        self.add(target, module, results, *args, **kwargs)


@pytest.fixture
async def daemon(sim_url: str, tmp_path: Path) -> AsyncIterator[tuple[Daemon, str, Path, Spy]]:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG.format(url=sim_url, extra_module=""))
    daemon = Daemon(load_config_file(path), config_path=str(path), seed=1)
    spy = Spy(daemon.store.add)
    daemon.store.add = spy  # type: ignore[method-assign]
    async with serving(daemon) as url:
        yield daemon, url, path, spy


async def test_metrics_match_the_metric_core_on_the_stored_results(
    daemon: tuple[Daemon, str, Path, Spy],
) -> None:
    _, url, _, spy = daemon
    await wait_for(lambda: len(spy.runs) >= 2)
    status, text = await get(url + "/metrics")
    assert status == 200
    runs = list(spy.runs)
    results = [r for _, _, batch in runs for r in batch]
    series = samples(text)
    ok = sum(r.ok for r in results)
    assert ok >= 4
    labels = {"target": "sim", "module": "fast"}
    # The scrape may land after one more run was stored: compare against the runs seen up to the scrape.
    scraped_ok = value(series, "fluidity_probe_requests_total", outcome="ok", **labels)
    assert scraped_ok >= ok
    done = [r for _, _, batch in spy.runs for r in batch if r.ok][: int(scraped_ok)]
    batch = IntervalBatch.from_sequences(intervals(r) for r in done)
    for tier, seconds in (("strict", 0.025), ("medium", 0.05), ("relaxed", 0.1)):
        expected = evaluate(batch, 1.0, seconds)
        assert value(series, "fluidity_probe_deadlines_total", tier=tier, **labels) == expected.total.sum()
        assert (
            value(series, "fluidity_probe_deadlines_missed_total", tier=tier, **labels)
            == expected.missed.sum()
        )
        assert value(series, "fluidity_probe_fluidity_index_count", tier=tier, **labels) == len(done)
    assert value(series, "fluidity_probe_ttft_seconds_count", **labels) == len(done)
    assert value(series, "fluidity_probe_output_tokens_total", **labels) == sum(r.output_tokens for r in done)
    assert value(series, "fluidity_probe_good_requests_total", **labels) == len(done)
    assert value(series, "fluidity_exporter_job_runs_total", job_id="probe:sim:fast") >= 2
    assert value(series, "fluidity_exporter_config_last_reload_successful") == 1


async def test_engine_metrics_are_re_exported_and_derived(daemon: tuple[Daemon, str, Path, Spy]) -> None:
    daemon_, url, _, spy = daemon
    await wait_for(lambda: len(spy.runs) >= 2 and len(daemon_.store.engines()) == 1)
    # Two more engine scrapes: a window to derive from.
    await wait_for(lambda: any(len(view.window) >= 3 for view in daemon_.store.engines()), timeout=10)
    _, text = await get(url + "/metrics")
    names = {name for name, _ in samples(text)}
    assert {"fluidity_engine_running_requests", "fluidity_engine_kv_cache_usage_ratio"} <= names
    assert "fluidity_engine_generation_tokens_total" in names
    assert any(name.startswith("fluidity_engine_window_ttft_seconds") for name in names)
    generated = value(samples(text), "fluidity_engine_generation_tokens_total", target="sim")
    assert generated >= sum(r.output_tokens for _, _, b in spy.runs for r in b if r.ok) - 2 * 24


async def test_probe_endpoint_runs_one_probe_with_a_fresh_registry(
    daemon: tuple[Daemon, str, Path, Spy],
) -> None:
    _, url, _, _ = daemon
    status, text = await get(url + "/probe?target=sim&module=fast")
    assert status == 200
    series = samples(text)
    assert value(series, "fluidity_probe_success", target="sim", module="fast") == 1
    assert value(series, "fluidity_probe_requests_total", target="sim", module="fast", outcome="ok") == 2
    assert not any(name.startswith("fluidity_exporter_") for name, _ in series)  # only this probe's series
    status, text = await get(url + "/probe?target=nope&module=fast")
    assert status == 400 and 'unknown target "nope"; valid: sim' in text
    status, text = await get(url + "/probe?target=sim&module=fats")
    assert status == 400 and 'unknown module "fats"; valid: fast' in text
    status, text = await get(url + "/probe?target=sim")  # a parameter left out is missing, not unknown
    assert status == 400 and text == "missing query parameter module; valid: fast\n"
    status, text = await get(url + "/probe")
    assert status == 400 and "missing query parameter target; valid: sim\n" in text
    status, text = await get(url + "/probe?target=sim&module=fast&debug=yes")  # not read as false
    assert status == 400 and text == "debug: expected true or false, got 'yes'\n"
    status, text = await get(url + "/probe?target=sim&module=fast&debug=true")
    assert status == 200 and "probe sim/fast: 2 requests" in text and "#0: ok" in text
    # Each request's fluidity per decode tier under the target's own Dp (it was missing from the view).
    assert re.search(
        r"#0: ok.*; Dp \d+\.\d{3}s; fluidity strict \d\.\d{3}, medium \d\.\d{3}, relaxed \d\.\d{3};", text
    ), text
    # Each request's flag with the evidence behind it (the runbook sends operators here for it).
    assert re.search(
        r"unreliable (True|False) \(loop lag \d+\.\d ms, \d+% of samples late, \d+ multi-event reads of \d+, "
        r"(kernel|read) stamps(: [^)]+)?\)",
        text,
    ), text


async def test_reload_swaps_only_a_fully_valid_config(
    daemon: tuple[Daemon, str, Path, Spy], sim_url: str
) -> None:
    daemon_, url, path, _ = daemon
    path.write_text(CONFIG.format(url=sim_url, extra_module=SECOND_MODULE))
    async with aiohttp.ClientSession() as session, session.post(url + "/-/reload") as response:
        assert response.status == 200
    assert "probe:sim:slow" in daemon_.jobs.job_ids()
    path.write_text(CONFIG.format(url=sim_url, extra_module="  broken: {schedule: {interval: -1s}}\n"))
    async with aiohttp.ClientSession() as session, session.post(url + "/-/reload") as response:
        assert response.status == 500
        assert "modules.broken.schedule.interval" in await response.text()
    assert "probe:sim:slow" in daemon_.jobs.job_ids()  # the previous config is still in force
    _, text = await get(url + "/metrics")
    assert value(samples(text), "fluidity_exporter_config_last_reload_successful") == 0
    renamed = CONFIG.format(url=sim_url, extra_module="").replace("  - name: sim\n", "  - name: sim2\n")
    path.write_text(renamed)
    async with aiohttp.ClientSession() as session, session.post(url + "/-/reload") as response:
        assert response.status == 200
    assert daemon_.jobs.job_ids() == ["engine:sim2", "probe:sim2:fast"]  # the old target's jobs are gone
    _, text = await get(url + "/metrics")
    assert not any(dict(labels).get("target") == "sim" for _, labels in samples(text))


async def test_health_readiness_and_index(daemon: tuple[Daemon, str, Path, Spy]) -> None:
    _, url, _, _ = daemon
    assert (await get(url + "/-/healthy"))[0] == 200
    assert (await get(url + "/-/ready"))[0] == 200
    status, text = await get(url + "/")
    assert status == 200 and 'href="/metrics"' in text and "sim / fast" in text


@pytest.mark.skipif(
    shutil.which("promtool") is None and not os.environ.get("CI"),
    reason="promtool comes with Debian's prometheus package (CI installs it and never skips)",
)
async def test_promtool_finds_nothing_to_complain_about(daemon: tuple[Daemon, str, Path, Spy]) -> None:
    _, url, _, spy = daemon
    await wait_for(lambda: len(spy.runs) >= 1)
    _, text = await get(url + "/metrics")
    check = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.strip() == "" and check.stderr.strip() == ""


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[str], tuple[int, subprocess.Popen[bytes]]]]:
    processes: list[subprocess.Popen[bytes]] = []

    def start(exporter_url: str) -> tuple[int, subprocess.Popen[bytes]]:
        port = free_port()
        target = urllib.parse.urlparse(exporter_url).netloc
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            f"scrape_configs:\n  - job_name: fluidity\n    static_configs: [{{targets: ['{target}']}}]\n"
        )
        command = [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        processes.append(process)
        return port, process

    yield start
    for process in processes:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.skipif(
    shutil.which("prometheus") is None and not os.environ.get("CI"),
    reason="Debian's prometheus package provides the server (CI installs it and never skips)",
)
async def test_a_real_prometheus_scrapes_and_answers_histogram_quantile(
    daemon: tuple[Daemon, str, Path, Spy], prometheus: Callable[[str], tuple[int, subprocess.Popen[bytes]]]
) -> None:
    _, url, _, spy = daemon
    await wait_for(lambda: len(spy.runs) >= 1)
    port, _ = prometheus(url)
    query = 'histogram_quantile(0.5, sum by (le) (fluidity_probe_fluidity_index_bucket{tier="medium"}))'
    api = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(query)}"
    answer: dict[str, Any] = {}

    async def answered() -> bool:
        try:
            status, text = await get(api)
        except aiohttp.ClientError:
            return False  # not listening yet
        if status == 200:
            answer.update(json.loads(text))
        return bool(answer and answer["data"]["result"])

    with contextlib.suppress(AssertionError):  # the assertion below shows the last answer
        await wait_for(answered, timeout=30, what=f"Prometheus to answer {query}")
    assert answer.get("status") == "success" and answer["data"]["result"], answer
    median = float(answer["data"]["result"][0]["value"][1])
    assert 0.0 <= median <= 1.0


async def test_probe_needs_the_token_when_one_is_configured(sim_url: str, tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    real = CONFIG.format(url=sim_url, extra_module="").replace("    simulated: true\n", "")
    path.write_text(real)
    assert await _probe_status(path, {}) == 403  # a real target, no token configured: refused
    path.write_text(
        real.replace(
            "  windows: [1m, 5m]", "  windows: [1m, 5m]\n  probe_token: {env: FLUIDITY_TEST_PROBE_TOKEN}"
        )
    )
    os.environ["FLUIDITY_TEST_PROBE_TOKEN"] = "t0ken"
    try:
        assert await _probe_status(path, {}) == 401
        assert await _probe_status(path, {"Authorization": "Bearer wrong"}) == 401
        assert await _probe_status(path, {"Authorization": "Bearer t0ken"}) == 200
    finally:
        del os.environ["FLUIDITY_TEST_PROBE_TOKEN"]


async def _probe_status(path: Path, headers: dict[str, str]) -> int:
    daemon = Daemon(load_config_file(path), config_path=str(path))
    async with serving(daemon) as url:
        return await get_status(f"{url}/probe?target=sim&module=fast", headers)


async def get_status(url: str, headers: dict[str, str]) -> int:
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        return response.status


PROBES_REFUSED = (
    "fluidity_probe_requests_total",
    (("module", "fast"), ("outcome", "connect_error"), ("target", "sim")),
)
SCRAPES_REFUSED = (
    "fluidity_exporter_engine_scrape_errors_total",
    (("reason", "connect_error"), ("target", "sim")),
)


async def test_a_dead_target_is_counted_and_the_daemon_stays_up(tmp_path: Path) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    path = tmp_path / "config.yaml"
    path.write_text(
        CONFIG.format(url=dead, extra_module="").replace(
            "kind: vllm, interval: 1s", "kind: vllm, interval: 1s"
        )
    )
    daemon = Daemon(load_config_file(path), config_path=str(path))
    async with serving(daemon) as url:

        async def probes_and_scrapes_failed() -> bool:
            series = samples((await get(url + "/metrics"))[1])
            probes = series.get(PROBES_REFUSED, 0.0)
            return probes >= 2 and series.get(SCRAPES_REFUSED, 0.0) >= 1

        await wait_for(probes_and_scrapes_failed, timeout=30, what="two refused probes and a refused scrape")
        status, text = await get(url + "/metrics")
        assert status == 200 and (await get(url + "/-/ready"))[0] == 200
    series = samples(text)
    assert (
        value(series, "fluidity_probe_requests_total", target="sim", module="fast", outcome="connect_error")
        >= 2
    )
    assert value(series, "fluidity_probe_requests_total", target="sim", module="fast", outcome="ok") == 0
    assert (
        value(series, "fluidity_exporter_engine_scrape_errors_total", target="sim", reason="connect_error")
        >= 1
    )
    assert (
        value(series, "fluidity_exporter_job_errors_total", job_id="probe:sim:fast") == 0
    )  # no bug, a result


async def test_the_gateway_view_is_scraped_beside_the_engines(sim_url: str, tmp_path: Path) -> None:
    async with fake_gateway() as gateway:
        path = tmp_path / "config.yaml"
        gateway_line = f'    gateway_metrics: {{url: "{gateway}/metrics", interval: 1s}}\n'
        text = CONFIG.format(url=sim_url, extra_module="").replace(
            "modules:\n", gateway_line + "modules:\n", 1
        )
        path.write_text(text)
        daemon = Daemon(load_config_file(path), config_path=str(path), seed=1)
        async with serving(daemon) as url:
            assert "gateway:sim" in daemon.jobs.job_ids()
            await wait_for(lambda: any(len(view.window) >= 3 for view in daemon.store.gateways()))
            await wait_for(lambda: any(len(view.window) >= 2 for view in daemon.store.engines()))
            status, body = await get(url + "/metrics")
    assert status == 200
    series = samples(body)
    assert value(series, "fluidity_gateway_info", target="sim", gateway="llm-d-epp") == 1
    assert value(series, "fluidity_engine_info", target="sim", engine="vllm") == 1
    assert value(series, "fluidity_gateway_scrape_success", target="sim") == 1
    assert value(series, "fluidity_gateway_requests_total", target="sim") % 100 == 0  # 100 per scrape
    # Every scrape adds the fixture's histogram once, so any window's quantile is the fixture's own.
    p50 = value(series, "fluidity_gateway_window_ttft_seconds", target="sim", window="1m", percentile="50")
    assert p50 == pytest.approx(0.15)
    assert (
        "fluidity_engine_window_ttft_seconds",
        (("percentile", "50"), ("target", "sim"), ("window", "1m")),
    ) in series
    assert value(series, "fluidity_probe_ttft_seconds_count", target="sim", module="fast") > 0


SESSION_MODULE = """  talk:
    workload:
      prompt_tokens: "fixed:300"
      output_tokens: "fixed:16"
      turns: 3
      think_time: "fixed:0.05"
    requests_per_run: 6
    concurrency: 2
    schedule: {interval: 1h}
"""


async def test_a_module_with_turns_sends_sessions_and_metrics_show_follow_ups_apart(
    sim_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        CONFIG.format(url=sim_url, extra_module=SESSION_MODULE).replace("api: completions", "api: chat")
    )
    daemon = Daemon(load_config_file(path), config_path=str(path), seed=2)
    spy = Spy(daemon.store.add)
    daemon.store.add = spy  # type: ignore[method-assign]
    async with serving(daemon) as url:
        await wait_for(lambda: any(module == "talk" for _, module, _ in spy.runs))
        _, text = await get(url + "/metrics")
        _, engine = await get(sim_url + "/metrics")
        status, probed = await get(url + "/probe?target=sim&module=talk")
        spent = list(daemon.targets["sim"].budget.spent)
    assert status == 200 and "fluidity_probe_turn_ttft_seconds_bucket" in probed
    results = next(results for _, module, results in spy.runs if module == "talk")
    sessions = {r.session for r in results}
    assert len(sessions) == 2 and all(r.ok for r in results)
    assert sorted((r.session, r.turn) for r in results) == sorted((s, t) for s in sessions for t in (1, 2, 3))
    series = samples(text)
    labels = {"target": "sim", "module": "talk"}
    assert value(series, "fluidity_probe_turn_ttft_seconds_count", **labels, turn="first") == 2
    assert value(series, "fluidity_probe_turn_ttft_seconds_count", **labels, turn="followup") == 4
    cached = value(series, "fluidity_probe_prompt_cached_tokens_total", **labels, turn="followup")
    prompt = value(series, "fluidity_probe_prompt_tokens_total", **labels, turn="followup")
    # Each follow-up's conversation so far came back from the simulator's prefix cache: all but its new
    # 300-token message, the answer before it, the template's tokens and a partial last block.
    assert 0.5 < cached / prompt < 1
    for r in results:
        if r.turn > 1:
            assert (r.prompt_tokens_reported or 0) - 300 - 16 - 2 * 16 <= (r.prompt_tokens_cached or 0)
    assert value(series, "fluidity_probe_prompt_cached_tokens_total", **labels, turn="first") == 0
    # The engine's own counter saw at least these hits.
    assert value(samples(engine), "vllm:prefix_cache_hits_total", model_name="sim-tiny", engine="0") >= cached
    assert sum(requests for _, requests, _ in spent) >= 6  # the budget counts every turn, as sent
