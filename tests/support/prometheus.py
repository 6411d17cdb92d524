"""A real Prometheus server scraping the exporter daemon, which probes the built-in simulator: the ground
truth for tests of PromQL written outside the exporter (dashboard panels, alerting and recording rules).

``running_stack(folder)`` starts, on free loopback ports: the simulator (with its vLLM-style engine
/metrics), a stand-in gateway (``tests.support.gateway``), a ``Daemon`` probing two modules of the
simulator every second, scraping its engine and the gateway every second and serving the jobs API, and Debian's ``prometheus`` binary scraping the daemon every second (optionally
loading rule files). ``Stack.query`` runs an instant query through Prometheus' HTTP API; ``Stack.run_job``
runs a capacity search or prefill profile through the daemon's jobs API, so job-result gauges exist too.

The simulator and the daemon run on an event loop in a thread of their own, so the tests that use the
stack are plain synchronous functions and a module-scoped fixture can hold one stack for many tests::

    @pytest.fixture(scope="module")
    def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
        with running_stack(tmp_path_factory.mktemp("stack")) as stack:
            stack.wait_for('fluidity_probe_requests_total{outcome="ok"} > 0')
            yield stack
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from exporter.app import Daemon
from exporter.settings import load_config_file
from exporter.sim import SimConfig
from tests.support.daemon import serving
from tests.support.gateway import fake_gateway
from tests.support.net import free_port
from tests.support.sim import running_sim

T = TypeVar("T")
Series = dict[str, Any]  # one element of data.result: {"metric": {...}, "value": [t, "v"]}

requires_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None and not os.environ.get("CI"),
    reason="Debian's prometheus package provides the server (CI installs it and never skips)",
)

JOBS_TOKEN = "integration-jobs-token"
TARGET = "sim"
MODULES = ("chat", "burst")
# Two modules probed every second (one closed loop, one open loop), engine scraping every second, the
# jobs API on (its limits let a quick capacity search run at 50 req/s), one short window so that the
# window gauges fill at once, an SLO with objectives and goodput bounds so every family is exported.
DAEMON_CONFIG = """
global:
  windows: [1m]
  state_dir: {state}
targets:
  - name: sim
    url: {url}
    api: completions
    simulated: true
    gpus: 1
    gpu_hour_price: 2.5
    engine_metrics: {{url: "{url}/metrics", kind: vllm, interval: 1s}}
    gateway_metrics: {{url: "{gateway}/metrics", kind: llm-d-epp, interval: 1s}}
modules:
  chat:
    workload: {{prompt_tokens: "uniform:low=32,high=128", output_tokens: "fixed:24"}}
    requests_per_run: 2
    concurrency: 2
    schedule: {{interval: 1s}}
  burst:
    workload: {{prompt_tokens: "fixed:64", output_tokens: "fixed:16"}}
    requests_per_run: 2
    arrival: poisson:rate=8
    schedule: {{interval: 1s}}
slos:
  default:
    prefill: {{deadline: 1s}}
    objectives: ["ttft:p99<=5", "fluidity:p99>=0.5"]
    goodput: {{ttft: 5s}}
jobs:
  api_token: {{file: {token}}}
  limits: {{max_rate: 100, max_concurrency: 32, max_tokens: 2000000, max_duration: 2m}}
"""


class PrometheusError(AssertionError):
    """Prometheus refused a query, or did not come up; the message carries its answer or log."""


class _LoopThread:
    """An asyncio event loop running in a daemon thread; ``call`` runs a coroutine there and waits."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="stack-loop", daemon=True)
        self.thread.start()

    def call(self, coroutine: Coroutine[Any, Any, T], timeout: float = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


@dataclass
class Stack:
    """The running servers' base URLs, and helpers that talk to them."""

    sim_url: str
    daemon_url: str
    prometheus_url: str
    log: Path  # Prometheus' own log, quoted when it fails

    def answer(self, promql: str, at: float | None = None) -> dict[str, Any]:
        """Prometheus' whole JSON answer to an instant query, errors included (status "error")."""
        params = {"query": promql} | ({} if at is None else {"time": f"{at:.3f}"})
        url = f"{self.prometheus_url}/api/v1/query?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                body = response.read()
        except urllib.error.HTTPError as error:  # 400/422/503 carry the same JSON with the reason
            body = error.read()
        answer: dict[str, Any] = json.loads(body)
        return answer

    def query(self, promql: str) -> list[Series]:
        """The series an instant query returns now; ``PrometheusError`` when it does not parse or run."""
        answer = self.answer(promql)
        if answer.get("status") != "success":
            raise PrometheusError(f"{promql}\n-> {answer.get('errorType')}: {answer.get('error')}")
        result: list[Series] = answer["data"]["result"]
        return result

    def wait_for(
        self, promql: str, timeout: float = 30.0, accept: Callable[[list[Series]], bool] = bool
    ) -> list[Series]:
        """Query until ``accept`` (default: any series) holds for the result, or fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            result = self.query(promql)
            if accept(result):
                return result
            if time.monotonic() > deadline:
                raise PrometheusError(f"no acceptable answer within {timeout} s to {promql}: {result}")
            time.sleep(0.25)

    def job_call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """Call the daemon's jobs API with the token; returns the status and the decoded JSON."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.daemon_url}/api/v1/jobs{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {JOBS_TOKEN}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def run_job(self, kind: str, body: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
        """Start a job (``capacity`` or ``prefill-profile``), wait for it and check that it succeeded."""
        status, record = self.job_call("POST", f"/{kind}", body)
        assert status == 202, (status, record)
        deadline = time.monotonic() + timeout
        while record["state"] == "running":
            assert time.monotonic() < deadline, f"job still running: {record.get('progress')}"
            time.sleep(0.1)
            status, record = self.job_call("GET", f"/{record['id']}")
            assert status == 200, (status, record)
        assert record["state"] == "succeeded", record
        return dict(record)


@contextlib.contextmanager
def running_stack(
    folder: Path,
    *,
    daemon_config: str = DAEMON_CONFIG,
    sim: SimConfig | None = None,
    rule_files: Sequence[Path] = (),
    interval: str = "1s",
) -> Iterator[Stack]:
    """Simulator, daemon and Prometheus running; yields once Prometheus has scraped the daemon.

    ``daemon_config`` is formatted with ``url`` (the simulator), ``gateway`` (the stand-in gateway),
    ``state`` and ``token`` (a file holding ``JOBS_TOKEN``). ``rule_files`` are loaded by Prometheus and evaluated every ``interval``,
    which is also its scrape interval.
    """
    loop = _LoopThread()
    services = contextlib.AsyncExitStack()
    try:
        sim_url = loop.call(services.enter_async_context(running_sim(sim))).url
        gateway_url = loop.call(services.enter_async_context(fake_gateway()))
        token = folder / "jobs-token"
        token.write_text(JOBS_TOKEN)
        path = folder / "daemon.yaml"
        path.write_text(
            daemon_config.format(url=sim_url, gateway=gateway_url, state=folder / "state", token=token)
        )
        daemon_url = loop.call(_start_daemon(services, path))
        with _prometheus(folder, daemon_url, rule_files, interval) as (prometheus_url, log):
            stack = Stack(sim_url, daemon_url, prometheus_url, log)
            stack.wait_for('up{job="fluidity"} == 1')
            yield stack
    finally:
        loop.call(services.aclose())
        loop.close()


async def _start_daemon(services: contextlib.AsyncExitStack, path: Path) -> str:
    daemon = Daemon(load_config_file(path), config_path=str(path), seed=1)
    url: str = await services.enter_async_context(serving(daemon))
    return url


@contextlib.contextmanager
def _prometheus(
    folder: Path, daemon_url: str, rule_files: Sequence[Path], interval: str
) -> Iterator[tuple[str, Path]]:
    port = free_port()
    config = folder / "prometheus.yml"
    scrape = {
        "job_name": "fluidity",
        "static_configs": [{"targets": [urllib.parse.urlparse(daemon_url).netloc]}],
    }
    settings = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [str(path) for path in rule_files],
        "scrape_configs": [scrape],
    }
    config.write_text(yaml.safe_dump(settings))
    log = folder / "prometheus.log"
    command = [
        "prometheus",
        f"--config.file={config}",
        f"--storage.tsdb.path={folder / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_ready(url, process, log)
        yield url, log
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_ready(url: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise PrometheusError(f"prometheus exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            if response.status == 200:
                return
        if time.monotonic() > deadline:
            raise PrometheusError(f"prometheus not ready after {timeout} s:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
