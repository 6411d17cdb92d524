"""``fluidity-exporter envoy-config``: a bootstrap the real Envoy accepts, with the observer's filter in
observability mode, and clear errors for bad flags."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exporter.cli import build_parser
from exporter.cli.envoy_config import ENVOY_CONFIG_COMMAND
from tests.support.envoy import validate

FLAGS = ["--upstream", "http://127.0.0.1:8000", "--listen", "127.0.0.1:10000", "--observer", "127.0.0.1:9469"]


def run_command(argv: list[str]) -> int:
    args = build_parser({"envoy-config": ENVOY_CONFIG_COMMAND}).parse_args(["envoy-config", *argv])
    return ENVOY_CONFIG_COMMAND.run(args)


def ext_proc(document: dict) -> dict:  # type: ignore[type-arg]
    manager = document["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    return manager["http_filters"][0]["typed_config"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    "upstream",
    ["http://127.0.0.1:8000", "https://vllm.inference.svc:8443", "http://[::1]:8000", "http://vllm"],
)
def test_envoy_validates_the_written_bootstrap(tmp_path: Path, upstream: str) -> None:
    out = tmp_path / "envoy.yaml"
    argv = ["--upstream", upstream, "--listen", "0.0.0.0:10000", "--observer", "127.0.0.1:9469"]
    assert run_command([*argv, "--output", str(out)]) == 0
    checked = validate(out)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "OK" in checked.stdout


def test_the_filter_only_observes_and_never_fails_traffic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_command(FLAGS) == 0
    document = yaml.safe_load(capsys.readouterr().out)
    config = ext_proc(document)
    assert config["observability_mode"] is True
    assert config["failure_mode_allow"] is True
    mode = config["processing_mode"]
    assert (mode["response_body_mode"], mode["request_body_mode"]) == ("STREAMED", "STREAMED")
    assert document["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    route = document["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    assert route["route_config"]["virtual_hosts"][0]["routes"][0]["route"]["timeout"] == "0s"


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--upstream", "ftp://x", "--upstream: must be an http(s) URL"),
        ("--upstream", "http://x:8000/v1/chat", "--upstream: give the engine's root URL without a path"),
        ("--listen", "10000", "--listen: must be HOST:PORT"),
        ("--observer", "127.0.0.1:70000", "--observer: port 70000 is out of range"),
    ],
)
def test_a_bad_flag_is_named(flag: str, value: str, message: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = list(FLAGS)
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    assert run_command(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err


def test_an_unwritable_output_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_command([*FLAGS, "--output", str(tmp_path / "missing" / "envoy.yaml")]) == 2
    assert "cannot write --output" in capsys.readouterr().err
