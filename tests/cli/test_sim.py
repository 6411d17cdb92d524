"""``fluidity-exporter sim`` as a user runs it: a real process that listens, serves and stops on SIGTERM."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

# `python -m exporter sim ...` with only the sim command registered (the test must not depend on the other
# commands' modules); the parser, dispatch and signal handling are the real ones.
ENTRY = (
    "import sys; from exporter.cli import build_parser; from exporter.cli.sim import SIM_COMMAND; "
    "args = build_parser({'sim': SIM_COMMAND}).parse_args(sys.argv[1:]); sys.exit(SIM_COMMAND.run(args))"
)


def test_sim_command_serves_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    config = tmp_path / "sim.yaml"
    config.write_text("preset: tiny\nmodel: my-model\n")
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "sim", "--port", "0", "--config", str(config), "--chunked-prefill"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"serving my-model \(tiny\) on (http://127\.0\.0\.1:\d+)", line)
        assert match, line
        body = json.dumps({"model": "my-model", "prompt": "hi", "max_tokens": 3}).encode()
        request = urllib.request.Request(match.group(1) + "/v1/completions", data=body)
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert json.load(resp)["usage"]["completion_tokens"] == 3
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "stopped" in out


def test_sim_help_lists_presets_and_faults() -> None:
    result = subprocess.run(
        [sys.executable, "-c", ENTRY, "sim", "--help"], capture_output=True, text=True, timeout=30, check=True
    )
    assert "llama-3.1-8b-h100" in result.stdout and "slow_drip" in result.stdout


def test_a_port_in_use_is_one_line_naming_where_and_why() -> None:
    """It printed asyncio's own sentence, with the address again as a Python tuple."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-c", ENTRY, "sim", "--port", str(port)],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 1
    assert (
        result.stderr
        == f"fluidity-exporter sim: error: cannot listen on 127.0.0.1:{port}: address already in use\n"
    )
