"""Waiting for something that happens in the background, with a deadline instead of a fixed sleep:
``wait_for`` in async tests, ``wait_until`` in synchronous ones. Wait for the condition a test then
asserts, so a slow machine makes the test slower, not red, and a broken one fails with what never came."""

from __future__ import annotations

import asyncio
import inspect
import linecache
import time
from collections.abc import Awaitable, Callable

POLL_S = 0.05


async def wait_for(
    condition: Callable[[], bool | Awaitable[bool]], timeout: float = 15.0, *, what: str | None = None
) -> None:
    """Return as soon as ``condition()`` is true (it may be a coroutine function); fail the test after
    ``timeout`` seconds, naming what was awaited (``what``, else the condition's name or source)."""
    deadline = time.monotonic() + timeout
    while True:
        held = condition()
        if inspect.isawaitable(held):
            held = await held
        if held:
            return
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or describe(condition)}")
        await asyncio.sleep(POLL_S)


def wait_until(condition: Callable[[], bool], timeout: float = 15.0, *, what: str | None = None) -> None:
    """``wait_for`` for synchronous tests (and threads): polls ``condition`` until it holds or fails the
    test after ``timeout`` seconds, naming what was awaited."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or describe(condition)}")
        time.sleep(POLL_S)


def describe(condition: Callable[..., object]) -> str:
    """A lambda's body as written (``len(spy.runs) >= 2``, found from its code's source positions), else
    the function's name."""
    code = condition.__code__
    if condition.__name__ != "<lambda>":
        return condition.__name__
    spans = [(line, end, col, end_col) for line, end, col, end_col in code.co_positions() if col and end_col]
    if not spans:
        return "a condition"
    first = min((line, col) for line, _, col, _ in spans if line is not None)
    last = max((end, end_col) for _, end, _, end_col in spans if end is not None)
    lines = [linecache.getline(code.co_filename, number) for number in range(first[0], last[0] + 1)]
    lines[-1] = lines[-1][: last[1]]
    lines[0] = lines[0][first[1] :]
    return " ".join(line.strip() for line in lines) or "a condition"
