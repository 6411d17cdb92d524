"""``fluidity-exporter shard`` refuses bad input at once, exit 2 like every bad flag: a coordinator URL
that is no URL was polled without a word until ``--idle-exit``."""

from __future__ import annotations

import time

import pytest

from exporter.cli import main


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--coordinator", "notaurl", "--shard", "0"],
            "--coordinator (or $FLUIDITY_SHARD_COORDINATOR): must be an http(s) URL like http://host:8000, "
            'got "notaurl"',
        ),
        (
            ["--coordinator", "http://127.0.0.1:19799", "--shard", "-1"],
            '--shard (or $JOB_COMPLETION_INDEX): must be an integer >= 0, got "-1"',
        ),
        (
            ["--coordinator", "http://127.0.0.1:19799", "--shard", "0", "--token-file", "/nonexistent/token"],
            "--token-file: cannot read the secret file /nonexistent/token: No such file or directory",
        ),
        (
            ["--coordinator", "http://127.0.0.1:19799", "--shard", "0", "--api-key-file", "/dev/null"],
            "--api-key-file: the secret file /dev/null is empty",
        ),
    ],
)
def test_bad_input_exits_2_at_once_with_a_message(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    assert main(["shard", *flags, "--idle-exit", "3"]) == 2
    assert time.monotonic() - started < 2  # refused, not polled until --idle-exit
    assert capsys.readouterr().err == f"fluidity-exporter shard: error: {message}\n"


def test_a_shard_number_from_the_environment_is_checked_too(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "two")
    assert main(["shard", "--coordinator", "http://127.0.0.1:19799"]) == 2
    assert 'must be an integer >= 0, got "two"' in capsys.readouterr().err
