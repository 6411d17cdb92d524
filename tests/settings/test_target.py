"""How to reach a target: one set of readers (``exporter.settings.target``) for the daemon config's
``targets[]`` and a one-shot run's flags, so the same bad value fails with the same message."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from exporter.settings import SettingsError, parse_config
from exporter.settings.oneshot import flag_of
from exporter.settings.target import Secret, Timeouts
from exporter.settings.target_flags import TARGET_FLAGS, read_target_settings

# Every flag read_target_settings reads; a one-shot run's options hold None for those not given.
FLAG_KEYS = (
    "api", "model", "api_key_env", "api_key_file", "header", "extra_body", "ttft_timeout", "idle_timeout",
    "total_timeout", "insecure", "ca_file",
)  # fmt: skip
URL = "http://127.0.0.1:1"


def flag_options(**given: Any) -> dict[str, Any]:
    return dict.fromkeys(FLAG_KEYS) | given


def config_problems(target: dict[str, Any], environ: dict[str, str] | None = None) -> list[str]:
    entry = {"name": "t", "url": URL} | target
    with pytest.raises(SettingsError) as caught:
        parse_config("targets: " + json.dumps([entry]) + "\n", environ=environ or {})
    return caught.value.problems


def flag_problem(**given: Any) -> str:
    with pytest.raises(SettingsError) as caught:
        read_target_settings(flag_options(**given), URL)
    return str(caught.value)


# (the config's target keys, the flags, the config path of the problem)
SAME_MESSAGE = {
    "ttft above total": ({"timeouts": {"ttft": 700}}, {"ttft_timeout": 700}, "timeouts.ttft"),
    "bad idle timeout": ({"timeouts": {"idle": "soon"}}, {"idle_timeout": "soon"}, "timeouts.idle"),
    "bad header name": ({"headers": {"X Bad": "v"}}, {"header": ["X Bad: v"]}, "headers.X Bad"),
    "unknown api": ({"api": "embeddings"}, {"api": "embeddings"}, "api"),
    "unset key variable": (
        {"api_key": {"env": "FLUIDITY_TEST_UNSET_KEY"}},
        {"api_key_env": "FLUIDITY_TEST_UNSET_KEY"},
        "api_key.env",
    ),
    "missing CA file": (
        {"tls": {"ca_file": "/nonexistent/ca.pem"}},
        {"ca_file": "/nonexistent/ca.pem"},
        "tls.ca_file",
    ),
    # A file that exists but holds no certificate (this test file): refused when read, as TLS would.
    "CA file of no certificate": ({"tls": {"ca_file": __file__}}, {"ca_file": __file__}, "tls.ca_file"),
    "both key sources": (
        {"api_key": {"env": "K", "file": "/k"}},
        {"api_key_env": "K", "api_key_file": "/k"},
        "api_key",
    ),
}


@pytest.mark.parametrize("name", list(SAME_MESSAGE))
def test_a_bad_target_value_has_one_message_in_yaml_and_flags(name: str) -> None:
    target, flags, path = SAME_MESSAGE[name]
    (from_config,) = config_problems(target)
    from_flag = flag_problem(**flags)
    assert from_config.startswith(f"targets[0].{path}: ")
    assert from_flag == from_config.replace(f"targets[0].{path}", flag_of(path, TARGET_FLAGS))


def test_flags_and_config_reach_the_target_alike(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("sk-test\n")
    config = parse_config(
        "targets: "
        + json.dumps(
            [
                {
                    "name": "t",
                    "url": URL,
                    "api": "completions",
                    "model": "m",
                    "api_key": {"file": str(key)},
                    "headers": {"X-Team": "a"},
                    "extra_body": {"top_k": 1},
                    "timeouts": {"ttft": 5, "idle": "2s", "total": 60},
                }
            ]
        )
        + "\n",
        environ={},
    )
    settings = read_target_settings(
        flag_options(
            api="completions",
            model="m",
            api_key_file=str(key),
            header=["X-Team: a"],
            extra_body='{"top_k": 1}',
            ttft_timeout=5.0,
            idle_timeout=2.0,
            total_timeout=60.0,
        ),
        URL,
    )
    target = config.targets[0]
    assert settings.api_key == Secret("sk-test") == target.api_key
    assert (settings.api, settings.model, settings.headers) == (target.api, target.model, target.headers)
    assert settings.extra_body == target.extra_body
    assert settings.timeouts == target.timeouts == Timeouts(ttft=5.0, idle=2.0, total=60.0)


def test_no_flags_give_the_configs_defaults() -> None:
    settings = read_target_settings(flag_options(), URL)
    assert (settings.api, settings.api_key, settings.timeouts) == ("chat", None, Timeouts())


def test_a_total_alone_caps_the_limits_it_would_end_first() -> None:
    # The defaults (ttft 60 s, idle 30 s) are above a total of 10 s: not given, they take the total.
    (target,) = parse_config(
        "targets: " + json.dumps([{"name": "t", "url": URL, "timeouts": {"total": 10}}]) + "\n", environ={}
    ).targets
    settings = read_target_settings(flag_options(total_timeout=10.0), URL)
    assert settings.timeouts == target.timeouts == Timeouts(connect=10.0, ttft=10.0, idle=10.0, total=10.0)
