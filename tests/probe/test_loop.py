"""The event loop every long-running command runs on (``exporter.probe.loop``)."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest

from exporter.probe import loop as event_loop


class Interrupted(KeyboardInterrupt):
    """As ``exporter.cli.Terminated``: raised by a signal handler inside whatever task step runs."""


async def _raising(exc: BaseException) -> None:
    await asyncio.sleep(0)
    raise exc


async def _main_with_a_task_that_raises(exc: BaseException) -> None:
    task = asyncio.ensure_future(_raising(exc))  # never awaited: its exception is never retrieved
    await asyncio.sleep(0.2)
    assert task.done()


def _asyncio_errors(caplog: pytest.LogCaptureFixture) -> list[str]:
    gc.collect()  # the task is logged when it is collected
    return [r.getMessage() for r in caplog.records if r.name == "asyncio" and r.levelno >= logging.ERROR]


@pytest.mark.parametrize("loop", event_loop.LOOPS)
def test_a_task_a_signal_interrupted_is_not_logged_with_a_traceback(
    loop: str, caplog: pytest.LogCaptureFixture
) -> None:
    """CI saw ``bench --workers 2`` print a traceback after "SIGHUP: stopped at once, nothing written"."""
    with pytest.raises(Interrupted):
        event_loop.run(_main_with_a_task_that_raises(Interrupted()), loop=loop)
    assert _asyncio_errors(caplog) == []


@pytest.mark.parametrize("loop", event_loop.LOOPS)
def test_a_task_that_failed_otherwise_is_still_logged(loop: str, caplog: pytest.LogCaptureFixture) -> None:
    event_loop.run(_main_with_a_task_that_raises(ValueError("a bug")), loop=loop)
    assert any("Task exception was never retrieved" in message for message in _asyncio_errors(caplog))
