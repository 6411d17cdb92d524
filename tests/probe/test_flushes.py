"""The kept reads of many streams that come due in one turn of the loop are decoded a bounded share per
turn (``flushes.py``), in the order they came due, every one of them, and exactly as at once: a burst
of batches must not hold the loop (and every socket's next read) for all of them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import pytest

from exporter.probe import flushes, stream_reader
from exporter.probe.flushes import Flushes, loop_flushes
from exporter.probe.stream_reader import FLUSH_READS, StreamReader
from exporter.streams.decoder import StreamState
from exporter.streams.openai import FORMATS
from exporter.streams.result import ProbeResult
from exporter.streams.tokens import TokenCounter

STREAMS = 12


class Turns:
    """Counts the turns of the running loop: a callback that schedules itself again each turn."""

    def __init__(self) -> None:
        self.turn = 0
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.turn += 1
        self._handle = self._loop.call_soon(self._tick)

    def stop(self) -> None:
        self._handle.cancel()


async def settle(queue: Flushes, turns_limit: int = 1000) -> None:
    for _ in range(turns_limit):
        if not len(queue):
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{len(queue)} flushes still due after {turns_limit} turns")


async def test_a_burst_of_flushes_is_spread_over_turns_within_the_budget() -> None:
    now = [0.0]
    queue = Flushes(asyncio.get_running_loop(), clock=lambda: now[0], budget_s=0.001)
    ran: list[tuple[int, int]] = []  # (flush, turn)
    turns = Turns()

    def flush(index: int) -> Callable[[], None]:
        def run() -> None:
            ran.append((index, turns.turn))
            now[0] += 0.0004  # each batch takes 0.4 ms of the loop

        return run

    for index in range(10):
        queue.add(flush(index))
    await settle(queue)
    turns.stop()
    assert [index for index, _ in ran] == list(range(10))  # every one, in the order they came due
    per_turn = [sum(turn == t for _, turn in ran) for t in sorted({turn for _, turn in ran})]
    assert per_turn == [3, 3, 3, 1]  # 1 ms of budget: the batch that passes it is the turn's last


async def test_a_flush_longer_than_the_budget_still_runs_one_per_turn() -> None:
    now = [0.0]
    queue = Flushes(asyncio.get_running_loop(), clock=lambda: now[0], budget_s=0.001)
    ran: list[int] = []
    turns = Turns()

    def slow() -> None:
        ran.append(turns.turn)
        now[0] += 0.005

    for _ in range(3):
        queue.add(slow)
    await settle(queue)
    turns.stop()
    assert len(set(ran)) == 3  # never stuck, never two in a turn


async def test_a_flush_that_raises_leaves_the_others_due() -> None:
    loop = asyncio.get_running_loop()
    errors: list[object] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context.get("exception")))
    queue = Flushes(loop, clock=lambda: 0.0, budget_s=1.0)
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("a bug")

    queue.add(broken)
    queue.add(lambda: ran.append("after"))
    await settle(queue)
    assert ran == ["after"]
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)


def chat_read(text: str) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def reader_past_its_first_token() -> StreamReader:
    state = StreamState(ProbeResult(api="chat", max_tokens=100), FORMATS["chat"], TokenCounter(None))
    stream = StreamReader(state, 1 << 20)
    stream.on_headers(0.0, 200, {"content-type": "text/event-stream"})
    stream.on_read(1.0, chat_read(" first"))  # decoded at once: from now on, reads are kept
    return stream


async def test_streams_due_in_one_turn_are_decoded_over_several(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every stream of a batched engine gets its token in the same step: their batches come due in the
    same turn, and decoding them all there held the loop for several ms (the default bench: up to 28
    batches, 6 ms). With no budget to spare, each turn decodes one."""
    monkeypatch.setattr(flushes, "FLUSH_BUDGET_S", 0.0)
    decoded_in: list[int] = []
    flush = stream_reader.StreamReader._flush

    def noted(self: StreamReader) -> None:
        decoded_in.append(turns.turn)
        flush(self)

    monkeypatch.setattr(stream_reader.StreamReader, "_flush", noted)
    streams = [reader_past_its_first_token() for _ in range(STREAMS)]
    turns = Turns()
    for step in range(FLUSH_READS):  # one engine step: a token for every stream, read in one turn
        for stream in streams:
            stream.on_read(2.0 + step, chat_read(f" t{step}"))
    for _ in range(10 * STREAMS):
        if len(decoded_in) == STREAMS:
            break
        await asyncio.sleep(0)
    turns.stop()
    assert len(decoded_in) == STREAMS
    assert not len(loop_flushes(asyncio.get_running_loop()))
    assert len(set(decoded_in)) == STREAMS, decoded_in  # one batch a turn, not all in the first
    for stream in streams:  # and each decoded as at once: every token with its own stamp
        assert stream.state.result.token_times == [1.0, *(2.0 + step for step in range(FLUSH_READS))]
