"""The event loop every long-running command of the exporter runs on: uvloop's where it is installed.

Why: at a hundred concurrent streams nearly every chunk is its own wake-up of the loop, so the loop's
own cost per event, not parsing, dominates a measuring client's CPU (asyncio's selector loop spends
tens of microseconds per wake-up in Python). uvloop (libuv, written in C, used by uvicorn) does the
same work in a few. ``FLUIDITY_EVENT_LOOP=asyncio`` picks the standard loop instead (for comparison,
or on a platform uvloop does not support); the simulator keeps the standard loop, which was measured
to run its timer-heavy emitter better.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import os
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
ENV = "FLUIDITY_EVENT_LOOP"
LOOPS = ("uvloop", "asyncio")


def loop_factory(name: str | None = None) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory for the loop called ``name`` (default: ``$FLUIDITY_EVENT_LOOP``, else uvloop when
    importable); None means asyncio's default."""
    chosen = name or os.environ.get(ENV, "").strip() or "uvloop"
    if chosen not in LOOPS:
        raise ValueError(f"unknown event loop {chosen!r} in ${ENV}; valid: {', '.join(LOOPS)}")
    if chosen == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # a platform without uvloop's wheels: the standard loop still works
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T], *, loop: str | None = None) -> T:
    """``asyncio.run`` on the chosen loop, after moving everything start-up allocated (modules, config,
    tables) out of the garbage collector's sight: a full collection then scans only what the command
    allocates while it measures, and pauses the loop (and every stamp behind it) that much less."""
    gc.freeze()
    with asyncio.Runner(loop_factory=loop_factory(loop)) as runner:
        runner.get_loop().set_exception_handler(_quiet_interrupts)
        return runner.run(main)


async def off_the_loop(work: Callable[[], T], stop: threading.Event | None = None) -> T:
    """``work()`` in a thread of its own, awaited: a caller cancelled (the first Ctrl-C, a cancelled
    job) returns at once, leaving the thread to finish unseen, and the loop keeps running its other
    tasks meanwhile, though pure-Python work holds the GIL: each time the loop wants it back it may wait
    the interpreter's switch interval (5 ms), enough to delay read-time stamps. Why not
    ``asyncio.to_thread``: the default executor's threads are joined when the loop closes and at exit,
    so a cancelled command would still wait for the work (planning a trial of a million requests: tens
    of seconds). Only for pure work whose result nothing else needs once abandoned. ``stop`` is set
    when the caller is cancelled: work that looks at it now and then (``plan_trial``) ends early
    instead of holding the GIL, and the loop, for the rest of its course."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def run_work() -> None:
        try:
            outcome = functools.partial(done.set_result, work())
        except StopIteration as exc:  # a future refuses it (it would end the awaiting coroutine)
            outcome = functools.partial(done.set_exception, RuntimeError(f"the work raised {exc!r}"))
        except BaseException as exc:  # handed to the awaiting task, as an await would raise it
            outcome = functools.partial(done.set_exception, exc)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting
            loop.call_soon_threadsafe(_settle, done, outcome)

    threading.Thread(target=run_work, name="off-the-loop", daemon=True).start()
    try:
        return await done
    except asyncio.CancelledError:
        if stop is not None:  # abandoned: the work may end now
            stop.set()
        raise


def _settle(future: asyncio.Future[Any], outcome: Callable[[], None]) -> None:
    if not future.done():  # not cancelled meanwhile
        outcome()


def _quiet_interrupts(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """asyncio's handler, but silent about a task that a signal interrupted: SIGTERM and SIGHUP raise
    a ``KeyboardInterrupt`` inside whatever task step runs (``exporter.cli``), and that task, never
    awaited again, would be logged with a traceback when collected ("Task exception was never
    retrieved"), after the command had said how it stopped (seen in CI: ``bench --workers 2`` on
    SIGHUP)."""
    if isinstance(context.get("exception"), KeyboardInterrupt):
        return
    loop.default_exception_handler(context)
