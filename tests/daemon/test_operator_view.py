"""What an operator sees when things go wrong: a failing target named in the log and on the debug
views, /probe answering failed probes as data (blackbox_exporter's convention), reloads that are
refused aloud, the lifecycle switch, and the standard collectors and gzip on /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import logging
import re
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from exporter.app import ON_DEMAND_GRACE_S, SHUTDOWN_GRACE_S, Daemon, web_app
from exporter.exposition import render
from exporter.settings import default_config, load_config_file
from exporter.web.routes import build_app
from tests.support.daemon import samples, serving, value
from tests.support.net import serving_app
from tests.support.wait import wait_for

FAILING = """
targets:
  - name: t
    url: {url}
    model: m
    api: completions
    simulated: true
    budget: {{backoff_after_failures: 2, max_backoff: 1h}}
modules:
  m:
    workload: {{prompt_tokens: "fixed:16", output_tokens: "fixed:4"}}
    requests_per_run: 1
    schedule: {{interval: 0.2s}}
"""
# Probed every 0.2 s, the default 1h window would need 18,000 results: check-config refuses that.
FAST = "global: {windows: [5m]}\n"


@pytest.fixture
async def failing_server() -> AsyncIterator[str]:
    """A target that answers every completion with HTTP 503 and OpenAI's error JSON."""

    async def unavailable(_: web.Request) -> web.Response:
        error = {"error": {"message": "engine overloaded", "type": "server_error", "code": 503}}
        return web.json_response(error, status=503)

    app = web.Application()
    app.router.add_post("/v1/completions", unavailable)
    async with serving_app(app) as url:
        yield url


@contextlib.contextmanager
def silent_target() -> Iterator[str]:
    """A port that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text, encoding="utf-8")
    return path


async def fetch(url: str, **kwargs: object) -> tuple[int, str, dict[str, str]]:
    async with aiohttp.ClientSession() as session, session.get(url, **kwargs) as response:  # type: ignore[arg-type]
        return response.status, await response.text(), dict(response.headers)


async def test_a_failing_target_is_named_once_per_state_change(
    failing_server: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    daemon = Daemon(load_config_file(write(tmp_path, FAST + FAILING.format(url=failing_server))))
    async with serving(daemon) as url:
        await wait_for(lambda: daemon.targets["t"].health.state == "backing_off")
        for _ in range(3):  # skipped runs while backing off add no warning
            status, debug, _ = await fetch(url + "/probe?target=t&module=m&debug=true")
        _, index, _ = await fetch(url + "/")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith("target t failing: http_status: ")
    assert "503" in warnings[0] and "module m" in warnings[0]
    assert re.match(
        r"target t backing off for 30 s after 2 failed runs in a row; last error: http_status", warnings[1]
    )
    assert status == 200
    assert debug.startswith("probe t/m failed: target t: backing off; backing_off since ")
    assert "last error: http_status" in debug and "next probe after 20" in debug
    assert re.search(r"\n  \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ http_status HTTP 503", debug)  # no reprs
    assert "RecentResult(" not in debug
    assert "t: backing_off since" in index and "last error: http_status" in index
    # The jobs API is linked, and the probe links say what they need (a browser sends no token).
    assert '<a href="/api/v1/openapi.json">' in index and "needs that bearer token" in index


async def test_a_recovery_is_logged_with_the_last_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from exporter.daemon.target_health import TargetHealth
    from exporter.streams.result import Outcome, ProbeResult

    caplog.set_level(logging.WARNING)
    now = [1_800_000_000.0]
    health = TargetHealth("t", lambda: now[0])
    failed = ProbeResult("chat", outcome=Outcome.CONNECT_ERROR, error="connection refused")
    health.observe("m", [failed], failed_runs=1, backoff_s=0.0)
    health.observe("m", [failed], failed_runs=2, backoff_s=0.0)  # still failing: no new line
    now[0] += 60
    health.observe("m", [ProbeResult("chat")], failed_runs=0, backoff_s=0.0)
    assert [r.getMessage() for r in caplog.records] == [
        "target t failing: connect_error: connection refused (module m, at 2027-01-15T08:00:00Z)",
        "target t recovered after 2 failed runs (last error: connect_error: connection refused "
        "(module m, at 2027-01-15T08:00:00Z))",
    ]
    assert health.describe().startswith("ok since 2027-01-15T08:01:00Z; last error: connect_error")


def test_a_module_failing_beside_a_good_one_is_one_failure_not_a_flap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A module refused on every run (a prompt over the context) beside a module that succeeds: the
    target was logged failing and recovered at every interval; now once failing, once recovered."""
    from exporter.daemon.target_health import TargetHealth
    from exporter.streams.result import Outcome, ProbeResult

    caplog.set_level(logging.WARNING)
    now = [1_800_000_000.0]
    health = TargetHealth("t", lambda: now[0])
    refused = ProbeResult("chat", outcome=Outcome.HTTP_STATUS, http_status=400, error="too long")
    for _ in range(10):
        health.observe("toolong", [refused], failed_runs=1, backoff_s=0.0)
        now[0] += 5
        health.observe("good", [ProbeResult("chat")], failed_runs=0, backoff_s=0.0)
        now[0] += 5
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["target t failing"]
    assert health.state == "failing" and "failing modules: toolong" in health.describe()
    health.retain(["good"])  # a reload takes the module away: the next good run is a recovery
    health.observe("good", [ProbeResult("chat")], failed_runs=0, backoff_s=0.0)
    assert caplog.records[-1].getMessage().startswith("target t recovered (last error: http_status")
    assert health.state == "ok" and "failing modules" not in health.describe()


def test_a_back_off_ended_by_another_module_s_success_is_over_and_the_next_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from exporter.daemon.target_health import TargetHealth
    from exporter.streams.result import Outcome, ProbeResult

    caplog.set_level(logging.WARNING)
    health = TargetHealth("t", lambda: 1_800_000_000.0)
    failed = ProbeResult("chat", outcome=Outcome.CONNECT_ERROR, error="refused")
    health.observe("a", [failed], failed_runs=3, backoff_s=30.0)
    health.observe("b", [ProbeResult("chat")], failed_runs=0, backoff_s=0.0)  # a still failing
    assert health.state == "failing" and "next probe after" not in health.describe()
    health.observe("a", [failed], failed_runs=3, backoff_s=30.0)  # a new back-off: news again
    backing = [r.getMessage() for r in caplog.records if "backing off" in r.getMessage()]
    assert len(backing) == 2 and health.state == "backing_off"


def test_a_dead_target_logs_its_back_off_only_when_the_delay_changes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A day of a dead target: the delay grows 30, 60, ... 480, 600 s, then stays; one line per delay."""
    from exporter.daemon.budget import BudgetTracker
    from exporter.daemon.target_health import TargetHealth
    from exporter.settings.model import Budget
    from exporter.streams.result import Outcome, ProbeResult

    caplog.set_level(logging.DEBUG)
    now = [1_800_000_000.0]
    budget = BudgetTracker(Budget(backoff_after_failures=3, max_backoff_s=600.0), lambda: now[0])
    health = TargetHealth("t", lambda: now[0])
    failed = ProbeResult("chat", outcome=Outcome.CONNECT_ERROR, error="connection refused")
    for _ in range(150):  # each run the budget lets through fails again
        backoff_s = budget.record([failed])
        health.observe("m", [failed], budget.failed_runs, backoff_s)
        now[0] = max(now[0] + 60.0, budget.resume_at)
    lines = [r.getMessage() for r in caplog.records if "backing off" in r.getMessage()]
    delays = [re.match(r"target t backing off for (\d+) s after (\d+) failed runs", line) for line in lines]
    assert [(int(m[1]), int(m[2])) for m in delays if m] == [
        (30, 3),
        (60, 4),
        (120, 5),
        (240, 6),
        (480, 7),
        (600, 8),
    ], lines
    assert [r.levelno for r in caplog.records].count(logging.WARNING) == len(lines) + 1  # + "failing"
    # The last error and the back-off stay on the debug views all along.
    assert health.state == "backing_off" and health.failed_runs == 150 and health.backoff_s == 600.0
    assert "150 failed runs in a row" in health.describe()
    assert "last error: connect_error: connection refused" in health.describe()
    health.observe("m", [ProbeResult("chat")], failed_runs=0, backoff_s=0.0)
    health.observe("m", [failed], failed_runs=3, backoff_s=30.0)  # a new back-off after recovering
    assert caplog.records[-1].getMessage().startswith("target t backing off for 30 s after 3 failed runs")


async def test_probe_answers_a_failed_probe_as_data(failing_server: str, tmp_path: Path) -> None:
    config = FAILING.format(url=failing_server).replace("interval: 0.2s", "interval: 1h")
    daemon = Daemon(load_config_file(write(tmp_path, config)))
    async with serving(daemon) as url:
        await wait_for(lambda: daemon.targets["t"].health.failed_runs >= 1)
        status, text, headers = await fetch(url + "/probe?target=t&module=m")
        assert status == 200 and headers["Content-Type"] == render.CONTENT_TYPE
        series = samples(text)
        assert value(series, "fluidity_probe_success", target="t", module="m") == 0
        assert value(series, "fluidity_probe_failure_info", target="t", module="m", reason="http_status") == 1
        status, text, _ = await fetch(url + "/probe?target=t&module=m")  # now backing off: still data
        assert status == 200
        assert (
            value(samples(text), "fluidity_probe_failure_info", target="t", module="m", reason="backing_off")
            == 1
        )
        assert "Cached from scheduled probes" not in text


async def test_probe_timing_out_is_a_failed_probe_not_a_504(tmp_path: Path) -> None:
    with silent_target() as target:
        config = FAILING.format(url=target).replace("interval: 0.2s", "interval: 1h")
        daemon = Daemon(load_config_file(write(tmp_path, config)))
        async with serving(daemon) as url:
            headers = {"X-Prometheus-Scrape-Timeout-Seconds": "1.5"}
            status, text, _ = await fetch(url + "/probe?target=t&module=m", headers=headers)
    assert status == 200
    series = samples(text)
    assert value(series, "fluidity_probe_success", target="t", module="m") == 0
    assert value(series, "fluidity_probe_failure_info", target="t", module="m", reason="scrape_timeout") == 1
    assert 0.9 <= value(series, "fluidity_probe_duration_seconds", target="t", module="m") <= 1.5


async def test_a_probe_in_flight_at_shutdown_answers_as_failed_within_the_grace(tmp_path: Path) -> None:
    """SIGTERM's grace for an on-demand /probe: the web server waited 5 s for it, cancelled it, waited
    5 s more and closed the connection with no answer (curl got nothing, 11.7 s to
    stop). The probe now answers as failed, ``reason="shutdown"``, within ``ON_DEMAND_GRACE_S``."""
    with silent_target() as target:
        config = FAILING.format(url=target).replace("interval: 0.2s", "interval: 1h")
        daemon = Daemon(load_config_file(write(tmp_path, config)))
        headers = {"X-Prometheus-Scrape-Timeout-Seconds": "60"}
        async with serving_app(web_app(daemon), shutdown_timeout=SHUTDOWN_GRACE_S) as url:
            scrape = asyncio.ensure_future(fetch(url + "/probe?target=t&module=m", headers=headers))
            await wait_for(lambda: "m:on-demand" in daemon.targets["t"].busy, timeout=10.0)
            began = time.perf_counter()
        stopping = time.perf_counter() - began
        status, text, _ = await scrape
    assert status == 200
    series = samples(text)
    assert value(series, "fluidity_probe_failure_info", target="t", module="m", reason="shutdown") == 1
    assert value(series, "fluidity_probe_duration_seconds", target="t", module="m") >= ON_DEMAND_GRACE_S - 0.5
    assert stopping < 2 * SHUTDOWN_GRACE_S  # docs/daemon.md: 10 s at most (it took 10 s for this probe alone)


async def test_a_shutdown_as_a_probes_own_deadline_fires_leaves_that_deadline_alone(tmp_path: Path) -> None:
    """A deadline that has just fired stays in the daemon's set until its probe's task runs again; the
    shutdown hook tried to move it then and raised, and the shutdown ended in a traceback (found by
    review). Such a probe ends on its own deadline, a scrape timeout, not a shutdown."""
    with silent_target() as target:
        config = FAILING.format(url=target).replace("interval: 0.2s", "interval: 1h")
        daemon = Daemon(load_config_file(write(tmp_path, config)))
        errors: list[dict[str, object]] = []
        loop = asyncio.get_running_loop()
        loop.set_exception_handler(lambda _loop, context: errors.append(context))
        async with serving(daemon):
            probe = asyncio.ensure_future(daemon.probe_now("t", "m", 2.0))
            await wait_for(lambda: bool(daemon.on_demand.in_flight), timeout=10.0)
            (deadline,) = daemon.on_demand.in_flight
            when = deadline.when()
            assert when is not None
            loop.call_at(when + 0.01, daemon.cut_on_demand)
            # both due at once: the deadline fires, then the hook runs, in one turn of the loop
            time.sleep(max(when + 0.05 - loop.time(), 0.0))
            with pytest.raises(TimeoutError) as ended:
                await probe
        loop.set_exception_handler(None)
    assert errors == [] and daemon.shutting_down
    assert type(ended.value) is TimeoutError  # its own deadline (not a ProbeCutError)


async def test_metrics_has_the_standard_collectors_and_gzip(failing_server: str, tmp_path: Path) -> None:
    daemon = Daemon(load_config_file(write(tmp_path, FAST + FAILING.format(url=failing_server))))
    async with serving(daemon) as url, aiohttp.ClientSession(auto_decompress=False) as session:
        async with session.get(url + "/metrics", headers={"Accept-Encoding": "gzip"}) as response:
            assert response.headers["Content-Encoding"] == "gzip"
            assert response.headers["Content-Type"] == render.CONTENT_TYPE
            text = gzip.decompress(await response.read()).decode()
        async with session.get(url + "/metrics", headers={"Accept-Encoding": "identity"}) as response:
            assert "Content-Encoding" not in response.headers
    names = {name for name, _ in samples(text)}
    assert {"process_resident_memory_bytes", "process_cpu_seconds_total", "python_info"} <= names
    assert any(name.startswith("python_gc_") for name in names)


async def test_reload_refuses_what_run_could_not_apply_and_says_so(
    failing_server: str, tmp_path: Path
) -> None:
    path = write(tmp_path, FAILING.format(url=failing_server).replace("interval: 0.2s", "interval: 1h"))
    daemon = Daemon(load_config_file(path), config_path=str(path))
    async with serving(daemon) as url, aiohttp.ClientSession() as session:
        path.write_text(path.read_text().replace("interval: 1h", "interval: 99999999999h"))
        async with session.post(url + "/-/reload") as response:
            assert response.status == 500
            assert await response.text() == (
                f"{path}: 1 problem\n"
                '  modules.m.schedule.interval: must be a duration of at most 7d, got "99999999999h"\n'
            )
        _, text, _ = await fetch(url + "/metrics")
        assert value(samples(text), "fluidity_exporter_config_last_reload_successful") == 0
        path.write_text(
            "global: {listen_address: '127.0.0.1:19999'}\n" + path.read_text().replace("99999999999h", "1h")
        )
        async with session.post(url + "/-/reload") as response:
            assert response.status == 200
            assert (
                "global.listen_address changed from 0.0.0.0:9468 to 127.0.0.1:19999" in await response.text()
            )
        _, text, _ = await fetch(url + "/metrics")
        assert value(samples(text), "fluidity_exporter_config_last_reload_successful") == 1


async def test_reload_stamps_come_from_the_daemons_clock(failing_server: str, tmp_path: Path) -> None:
    path = write(tmp_path, FAILING.format(url=failing_server).replace("interval: 0.2s", "interval: 1h"))
    daemon = Daemon(load_config_file(path), config_path=str(path), clock=lambda: 1_700_000_000.0)
    try:
        ok, message = await daemon.reload()  # applied without start(): nothing is scheduled to run
        assert ok, message
    finally:
        await daemon.stop()
    stamp = "fluidity_exporter_config_last_reload_success_timestamp_seconds"
    assert daemon.registry.get_sample_value(stamp) == 1_700_000_000.0


async def test_a_listen_address_set_back_to_the_bound_one_is_no_change(
    failing_server: str, tmp_path: Path
) -> None:
    """The bound address, not the previous file, is what a new listen_address is compared with."""
    text = FAILING.format(url=failing_server).replace("interval: 0.2s", "interval: 1h")
    path = write(tmp_path, "global: {listen_address: '127.0.0.1:19998'}\n" + text)
    daemon = Daemon(load_config_file(path), config_path=str(path))
    daemon.listen_address = "127.0.0.1:19998"  # as serve() sets it once bound
    try:
        path.write_text("global: {listen_address: '127.0.0.1:19999'}\n" + text)
        assert await daemon.reload() == (
            True,
            f"reloaded {path}\nglobal.listen_address changed from 127.0.0.1:19998 to 127.0.0.1:19999: "
            "the exporter keeps listening on 127.0.0.1:19998 until it is restarted",
        )
        path.write_text("global: {listen_address: '127.0.0.1:19998'}\n" + text)
        assert await daemon.reload() == (True, f"reloaded {path}")  # back to where it listens: no note
    finally:
        await daemon.stop()


async def test_a_new_jobs_listen_address_is_said_to_wait_for_a_restart(
    failing_server: str, tmp_path: Path
) -> None:
    text = FAILING.format(url=failing_server).replace("interval: 0.2s", "interval: 1h")
    path = write(tmp_path, text)
    daemon = Daemon(load_config_file(path), config_path=str(path))
    try:
        path.write_text("global: {jobs_listen_address: '127.0.0.1:19997'}\n" + text)
        assert await daemon.reload() == (
            True,
            f"reloaded {path}\nglobal.jobs_listen_address changed from none (beside /metrics) to "
            "127.0.0.1:19997: the jobs API and /-/reload stay where they listen until the exporter is "
            "restarted (a --web.jobs-listen-address flag wins over the file)",
        )
    finally:
        await daemon.stop()


async def test_a_reload_of_the_embedded_default_is_a_conflict_not_a_failure(
    failing_server: str, caplog: pytest.LogCaptureFixture
) -> None:
    """No config file to re-read: nothing failed (once a 500, as a refused config answers), and the log
    says so (a SIGHUP once got no answer at all)."""
    daemon = Daemon(default_config(failing_server), config_path=None)
    async with serving(daemon) as url, aiohttp.ClientSession() as session:
        async with session.post(url + "/-/reload") as response:
            assert response.status == 409
            assert "no --config.file to reload (running on the embedded default)" in await response.text()
        assert "reload asked for: no --config.file to reload" in caplog.text
        _, text, _ = await fetch(url + "/metrics")
        assert value(samples(text), "fluidity_exporter_config_last_reload_successful") == 1


async def test_reload_over_http_needs_the_lifecycle_flag(failing_server: str, tmp_path: Path) -> None:
    path = write(tmp_path, FAST + FAILING.format(url=failing_server))
    daemon = Daemon(load_config_file(path), config_path=str(path))
    async with (
        serving_app(build_app(daemon)) as url,
        aiohttp.ClientSession() as session,
        session.post(f"{url}/-/reload") as response,
    ):
        assert response.status == 403
        assert "--web.enable-lifecycle" in await response.text()
