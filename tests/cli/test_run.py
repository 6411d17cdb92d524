"""``fluidity-exporter run`` as a user starts it: the embedded default, flags, bad configs, SIGTERM."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.cli.run import split_address
from exporter.web.listener import KEEPALIVE_S
from tests.support.net import free_port


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as response:
        return str(response.read().decode())


def test_embedded_default_probes_the_simulator_and_stops_cleanly_on_sigterm() -> None:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "exporter",
        "run",
        f"--web.listen-address=127.0.0.1:{port}",
        "--sim-preset=tiny",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline, text = time.monotonic() + 40, ""
        while (
            time.monotonic() < deadline
            and 'fluidity_probe_requests_total{module="default",outcome="ok"' not in text
        ):
            time.sleep(0.5)
            try:
                text = fetch(f"http://127.0.0.1:{port}/metrics")
            except OSError:
                continue
        assert 'fluidity_probe_requests_total{module="default",outcome="ok",target="sim"}' in text
        assert "fluidity_engine_running_requests" in text  # the simulator's vLLM metrics, re-exported
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert f"serving http://127.0.0.1:{port}/metrics" in out and "stopped" in out


def test_a_bad_config_lists_every_problem_and_exits_1(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("targets:\n  - {name: a, url: 'ftp://x'}\nmodules: {m: {requests_per_run: 0}}\n")
    result = subprocess.run(
        [sys.executable, "-m", "exporter", "run", f"--config.file={config}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "targets[0].url" in result.stderr and "modules.m.requests_per_run" in result.stderr


@pytest.mark.parametrize(
    ("address", "expected"),
    [("0.0.0.0:9468", ("0.0.0.0", 9468)), ("[::1]:9000", ("::1", 9000)), (":9468", ("0.0.0.0", 9468))],
)
def test_listen_addresses(address: str, expected: tuple[str, int]) -> None:
    assert split_address(address) == expected


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("9468", "must be HOST:PORT (e.g. 0.0.0.0:9468, :9468 or [::]:9468)"),
        ("host:port", "must be HOST:PORT (e.g. 0.0.0.0:9468, :9468 or [::]:9468)"),
        # a port above 65535 once bound port - 65536; the message names the range
        ("127.0.0.1:99999", "port 99999 is out of range (0 to 65535)"),
    ],
)
def test_a_bad_listen_address_names_the_flag(address: str, why: str) -> None:
    # As the config's global.listen_address says it.
    with pytest.raises(ValueError, match=re.escape(f'--web.listen-address: {why}, got "{address}"')):
        split_address(address)


def test_a_malformed_listen_address_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2, as every command's malformed flag, before a config is read or a port bound."""
    with pytest.raises(SystemExit) as exited:
        main(["run", "--web.listen-address", "9468"])
    assert exited.value.code == 2
    assert '--web.listen-address: must be HOST:PORT (e.g. 0.0.0.0:9468, :9468 or [::]:9468), got "9468"' in (
        capsys.readouterr().err
    )


def _start(config: Path | None, port: int) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "exporter", "run", f"--web.listen-address=127.0.0.1:{port}"]
    if config is not None:
        command.append(f"--config.file={config}")
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("embedded", [False, True])
def test_a_port_in_use_is_one_line_before_any_probe_starts(tmp_path: Path, embedded: bool) -> None:
    """With a config file, and on the embedded default, where the simulator once started (and logged
    that it did) before the port was found taken."""
    config = None if embedded else tmp_path / "config.yaml"
    if config is not None:
        config.write_text("targets:\n  - {name: a, url: 'http://127.0.0.1:9'}\nmodules: {m: {}}\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = _start(config, port)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 1
    assert err == f"fluidity-exporter: error: cannot listen on 127.0.0.1:{port}: address already in use\n"
    assert "Traceback" not in out


def test_port_0_says_the_port_the_system_chose(tmp_path: Path) -> None:
    """It printed "listening on 127.0.0.1:0; serving http://127.0.0.1:0/metrics"."""
    config = tmp_path / "config.yaml"
    config.write_text(  # nothing listens at the target: its probes fail, which is no matter here
        f"targets:\n  - {{name: a, url: 'http://127.0.0.1:{free_port()}', model: m}}\n"
        "modules: {m: {schedule: {interval: 1h}}}\n"
    )
    process = _start(config, 0)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        bound = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics", line)
        assert bound is not None and bound.group(1) != "0", line
        assert f"listening on 127.0.0.1:{bound.group(1)};" in line
        with urllib.request.urlopen(f"http://127.0.0.1:{bound.group(1)}/metrics", timeout=30) as response:
            assert b"fluidity_exporter_build_info" in response.read()
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)


def test_sigterm_during_a_probe_stops_without_a_traceback(tmp_path: Path) -> None:
    with socket.socket() as silent:  # accepts connections and never answers: the probe hangs
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        target = f"http://127.0.0.1:{silent.getsockname()[1]}"
        config = tmp_path / "config.yaml"
        config.write_text(
            f"targets:\n  - {{name: a, url: '{target}', model: m}}\nmodules: {{m: {{schedule: {{interval: 1h}}}}}}\n"
        )
        port = free_port()
        process = _start(config, port)
        try:
            assert process.stdout is not None
            assert "listening on" in process.stdout.readline()
            silent.settimeout(30)
            held, _ = silent.accept()  # the first probe is in flight, waiting for an answer
        finally:
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=30)
        held.close()
    assert process.returncode == 0, err
    assert "Traceback" not in err and "CancelledError" not in err and "a bug" not in err, err
    assert "stopped" in out


@pytest.mark.slow
def test_sigterm_during_an_on_demand_probe_stops_within_the_grace(tmp_path: Path) -> None:
    """A ``/probe`` in flight is given the same 5 s as the scheduled probes, not aiohttp's 60 s for a
    handler: a pod's default 30 s of grace would end in SIGKILL behind one (78 s to stop, once)."""
    with socket.socket() as silent:  # accepts connections and never answers: the probes hang
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        target = f"http://127.0.0.1:{silent.getsockname()[1]}"
        config = tmp_path / "config.yaml"
        config.write_text(
            "global: {probe_token: {env: PROBE_TOKEN}}\n"
            f"targets:\n  - {{name: a, url: '{target}', model: m}}\n"
            "modules: {m: {schedule: {interval: 1h}}}\n"
        )
        port = free_port()
        command = [sys.executable, "-m", "exporter", "run", f"--web.listen-address=127.0.0.1:{port}"]
        command.append(f"--config.file={config}")
        environment = {**os.environ, "PROBE_TOKEN": "secret"}
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment
        )
        held: list[socket.socket] = []
        try:
            assert process.stdout is not None
            assert "listening on" in process.stdout.readline()
            silent.settimeout(30)
            held.append(silent.accept()[0])  # the scheduled probe
            request = urllib.request.Request(f"http://127.0.0.1:{port}/probe?target=a&module=m")
            request.add_header("Authorization", "Bearer secret")
            asking = threading.Thread(target=_ask_quietly, args=(request,))
            asking.start()
            held.append(silent.accept()[0])  # the on-demand one
        finally:
            stopping = time.monotonic()
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=120)
            stopped_after = time.monotonic() - stopping
        for conn in held:
            conn.close()
        asking.join(timeout=10)
    assert process.returncode == 0, err
    assert "Traceback" not in err and "a bug" not in err, err
    assert "stopped" in out
    assert stopped_after < 20, stopped_after  # 5 s for the handler, then 5 s for the scheduled probe


def _ask_quietly(request: urllib.request.Request) -> None:
    with contextlib.suppress(OSError), urllib.request.urlopen(request, timeout=150) as response:
        response.read()


@pytest.mark.timeout(60)
def test_the_listener_closes_a_connection_that_sends_no_request_after_the_keep_alive(tmp_path: Path) -> None:
    """aiohttp's default held an idle connection 3,630 s (20,000 of them were all held)."""
    config = tmp_path / "config.yaml"
    config.write_text(
        f"targets:\n  - {{name: a, url: 'http://127.0.0.1:{free_port()}', model: m}}\n"
        "modules: {m: {schedule: {interval: 1h}}}\n"
    )
    process = _start(config, 0)
    try:
        assert process.stdout is not None
        bound = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics", process.stdout.readline())
        assert bound is not None
        with socket.create_connection(("127.0.0.1", int(bound.group(1))), timeout=KEEPALIVE_S + 10) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # headers never finished
            started = time.monotonic()
            assert sock.recv(1024) == b""  # closed by the daemon
            assert time.monotonic() - started < KEEPALIVE_S + 5
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)


def _status(url: str, *, method: str = "GET", token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


@pytest.mark.parametrize("by_flag", [False, True])
def test_the_jobs_api_listens_apart_from_metrics_when_asked(tmp_path: Path, by_flag: bool) -> None:
    """A job can saturate the replica: with a jobs address, /metrics (what Prometheus scrapes) serves no
    jobs API and no /-/reload, and the jobs port serves no /metrics."""
    metrics_port, jobs_port = free_port(), free_port()
    (tmp_path / "token").write_text("jobs-secret")
    jobs_key = "" if by_flag else f"global: {{jobs_listen_address: '127.0.0.1:{jobs_port}'}}\n"
    config = tmp_path / "config.yaml"
    config.write_text(
        f"{jobs_key}targets:\n  - {{name: a, url: 'http://127.0.0.1:{free_port()}', model: m}}\n"
        f"modules: {{m: {{schedule: {{interval: 1h}}}}}}\njobs: {{api_token: {{file: {tmp_path / 'token'}}}}}\n"
    )
    command = [
        sys.executable, "-m", "exporter", "run", f"--web.listen-address=127.0.0.1:{metrics_port}",
        f"--config.file={config}", "--web.enable-lifecycle",
        *([f"--web.jobs-listen-address=127.0.0.1:{jobs_port}"] if by_flag else []),
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert f"; the jobs API and /-/reload on 127.0.0.1:{jobs_port}" in line, line
        metrics, jobs = f"http://127.0.0.1:{metrics_port}", f"http://127.0.0.1:{jobs_port}"
        assert "fluidity_exporter_build_info" in fetch(f"{metrics}/metrics")
        assert _status(f"{metrics}/api/v1/jobs", token="jobs-secret") == 404
        assert _status(f"{metrics}/-/reload", method="POST") == 404
        assert "its own port (global.jobs_listen_address)" in fetch(f"{metrics}/")
        assert _status(f"{jobs}/api/v1/jobs", token="jobs-secret") == 200
        assert _status(f"{jobs}/api/v1/jobs") == 401
        assert _status(f"{jobs}/-/reload", method="POST") == 200
        assert _status(f"{jobs}/metrics") == 404
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0 and "Traceback" not in err, err


def test_a_jobs_address_on_the_metrics_port_is_refused_saying_why(capsys: pytest.CaptureFixture[str]) -> None:
    """It failed to bind as "address already in use", as if another process held the port."""
    argv = ["run", "--web.listen-address=127.0.0.1:9468", "--web.jobs-listen-address=0.0.0.0:9468"]
    assert main(argv) == 1
    assert capsys.readouterr().err == (
        "fluidity-exporter: error: the jobs API's address 0.0.0.0:9468 (--web.jobs-listen-address, else "
        "global.jobs_listen_address) is on the metrics port 9468: give it a port of its own\n"
    )
