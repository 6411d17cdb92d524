"""The event loop every long-running command runs on (``exporter.probe.loop``)."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading

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


@pytest.mark.parametrize("loop", event_loop.LOOPS)
def test_work_off_the_loop_returns_its_result_or_raises_its_error(loop: str) -> None:
    async def main() -> int:
        with pytest.raises(ValueError, match="no plan"):
            await event_loop.off_the_loop(lambda: int("no plan"))
        with pytest.raises(RuntimeError, match="StopIteration"):  # a future refuses it: it hung
            await event_loop.off_the_loop(lambda: next(iter(())))
        return await event_loop.off_the_loop(lambda: sum(range(10)))

    assert event_loop.run(main(), loop=loop) == 45


@pytest.mark.parametrize("loop", event_loop.LOOPS)
def test_a_cancelled_caller_of_work_off_the_loop_returns_at_once(loop: str) -> None:
    """The first Ctrl-C cancels the command's task: it must not wait for the work (a plan of a million
    requests took ~40 s), and the loop serves other tasks while the work runs."""
    release = threading.Event()

    async def main() -> list[str]:
        seen: list[str] = []
        work = asyncio.ensure_future(event_loop.off_the_loop(lambda: release.wait(30)))
        await asyncio.sleep(0.05)
        seen.append("served while the work runs")
        work.cancel()
        with pytest.raises(asyncio.CancelledError):
            await work
        seen.append("cancelled before the work ended")
        assert not release.is_set()
        return seen

    try:
        assert event_loop.run(main(), loop=loop) == [
            "served while the work runs",
            "cancelled before the work ended",
        ]
    finally:
        release.set()  # the abandoned thread ends now


@pytest.mark.parametrize("loop", event_loop.LOOPS)
def test_work_given_up_is_told_to_stop_and_work_done_is_not(loop: str) -> None:
    """A cancelled job's plan of a million requests would hold the GIL for tens of seconds after it
    was given up: work that looks at ``stop`` ends early."""
    stop, kept_on, ended = threading.Event(), threading.Event(), threading.Event()

    def work() -> int:
        while not stop.wait(0.005):
            kept_on.set()
        ended.set()
        return 1

    async def main() -> None:
        task = asyncio.ensure_future(event_loop.off_the_loop(work, stop))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        done = threading.Event()
        assert await event_loop.off_the_loop(lambda: 2, done) == 2
        assert not done.is_set()  # finished: nothing to stop

    event_loop.run(main(), loop=loop)
    assert kept_on.is_set() and ended.wait(5) and stop.is_set()
