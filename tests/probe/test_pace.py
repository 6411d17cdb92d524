"""The pace of the paced reads (``socket_reads.next_pace``): slower while every stream's gaps are longer
than the reads' spans will be, back to the fastest at the first gap that its read's span (plus a
margin) did not clear; and, on the real client, a pace that slows for 20 ms gaps without reading two
chunks together."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.probe.client import ProbeClient
from exporter.probe.socket_reads import (
    LATE_READ_S,
    MAX_PACE_S,
    PACE_EVIDENCE,
    PACE_S,
    PACE_WINDOW_S,
    SPAN_FLOOR,
    SPAN_MARGIN_S,
    UNPACED,
    LateReads,
    Pace,
    loop_reads,
    next_pace,
)
from exporter.settings.target import TargetSettings
from exporter.streams.request import RequestSpec
from exporter.streams.result import Outcome, ProbeResult
from exporter.streams.saturation import SAMPLE_INTERVAL_S
from tests.probe.helpers import TEST_TIMEOUTS, stamped_pair

INF = math.inf


def window(pace: Pace, start: float, gaps: int, shortest: float) -> Pace:
    """One paced read at ``start`` with those gaps, then an empty one a whole window later."""
    return next_pace(next_pace(pace, start, gaps, shortest), start + PACE_WINDOW_S, 0, INF)


def test_the_pace_slows_one_doubling_per_window_of_long_gaps_up_to_the_slowest() -> None:
    pace = Pace(since=0.0)
    seen = []
    for k in range(5):
        pace = window(pace, k * PACE_WINDOW_S, PACE_EVIDENCE, 0.020)
        seen.append(pace.seconds)
    assert seen == [2 * PACE_S, 4 * PACE_S, MAX_PACE_S, MAX_PACE_S, MAX_PACE_S]
    assert MAX_PACE_S == 4 * PACE_S


def test_the_first_window_starts_at_the_first_paced_read() -> None:
    first = next_pace(Pace(), 1000.0, PACE_EVIDENCE, 1.0)
    assert first.since == 1000.0 and first.seconds == PACE_S  # not judged on that read alone
    assert next_pace(first, 1000.0 + PACE_WINDOW_S, 0, INF).seconds == 2 * PACE_S


def test_no_slowing_without_evidence_or_within_a_window() -> None:
    assert window(Pace(), 0.0, PACE_EVIDENCE - 1, 1.0).seconds == PACE_S  # too few gaps seen
    assert window(Pace(), 0.0, 0, INF).seconds == PACE_S  # none (the Python reads have no keep mode)
    half = next_pace(Pace(since=0.0), PACE_WINDOW_S / 2, 100, 1.0)
    assert half.seconds == PACE_S and half.gaps == 100  # the window is not over: evidence is gathered
    # Gaps under the doubled pace's spans plus twice the margin, or under its floor of 1.5 paces plus
    # the margin, hold the pace where it is.
    needed = SPAN_FLOOR * 2 * PACE_S + SPAN_MARGIN_S
    assert needed > 2 * PACE_S + 2 * SPAN_MARGIN_S  # the floor, with spans on time
    assert window(Pace(), 0.0, 100, needed - 1e-6).seconds == PACE_S
    assert window(Pace(), 0.0, 100, needed).seconds == 2 * PACE_S
    # Spans that usually overrun the pace (a long read of many sockets, a late timer) want longer gaps.
    late = 2 * PACE_S + 0.003 + 2 * SPAN_MARGIN_S
    assert window(Pace(overrun=0.003), 0.0, 100, late - 1e-6).seconds == PACE_S
    assert window(Pace(overrun=0.003), 0.0, 100, late).seconds == 2 * PACE_S


@pytest.mark.parametrize("shortest", [SPAN_FLOOR * MAX_PACE_S - 1e-6, 0.0079, 0.0041])
def test_a_short_gap_brings_the_pace_straight_back_to_the_fastest(shortest: float) -> None:
    # A stream read together shows gaps of about one span, not its own: halving would take a step
    # (and one more shared stamp) per halving.
    after = next_pace(Pace(MAX_PACE_S, since=0.0), 0.001, 1, shortest)
    assert after.seconds == PACE_S
    assert after.since == 0.001 and after.gaps == 0  # a new window starts
    kept = next_pace(Pace(MAX_PACE_S, since=0.0), 0.001, 1, SPAN_FLOOR * MAX_PACE_S)
    assert kept.seconds == MAX_PACE_S  # the floor of 1.5 paces (over the span and the margin): kept


def test_a_gap_within_a_long_span_brings_the_pace_back() -> None:
    """What merges two chunks is the span of the reads, not the pace: 13 ms gaps clear an 8 ms pace
    but not a read that took 12 ms from the start of the one before (a late timer, a long read)."""
    assert next_pace(Pace(MAX_PACE_S, since=0.0), 0.001, 1, 0.013, 0.009).seconds == MAX_PACE_S
    assert next_pace(Pace(MAX_PACE_S, since=0.0), 0.001, 1, 0.013, 0.012).seconds == PACE_S
    assert next_pace(Pace(MAX_PACE_S, since=0.0), 0.001, 1, 0.0115, 0.008).seconds == PACE_S  # the floor


def test_the_overrun_is_a_moving_average_of_the_spans_past_the_pace() -> None:
    pace = Pace(MAX_PACE_S, since=0.0)
    for k in range(200):
        pace = next_pace(pace, k * 0.01, 0, INF, MAX_PACE_S + 0.002)
    assert pace.overrun == pytest.approx(0.002, rel=1e-3)
    once = next_pace(pace, 3.0, 0, INF, MAX_PACE_S + 0.1)  # one stall moves it by a twentieth
    assert once.overrun == pytest.approx(pace.overrun + (0.1 - pace.overrun) / 20)
    assert next_pace(once, 3.01, 0, INF).overrun == once.overrun  # not a paced read: no span


@pytest.mark.parametrize("pace", [PACE_S, MAX_PACE_S])
def test_a_gap_no_pace_separates_unpaces_the_reads_until_a_window_of_longer_gaps(pace: float) -> None:
    unpaced = next_pace(Pace(pace, since=0.0), 0.001, 1, 2 * PACE_S - 1e-6)
    assert unpaced.seconds == UNPACED and unpaced.since == 0.001
    assert window(unpaced, 0.01, 100, 2 * PACE_S - 1e-6).seconds == UNPACED  # still too fast
    assert window(unpaced, 0.01, PACE_EVIDENCE - 1, 1.0).seconds == UNPACED  # too few gaps seen
    assert window(unpaced, 0.01, PACE_EVIDENCE, 2 * PACE_S).seconds == PACE_S  # two paces: paced again


@settings(max_examples=300, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.floats(0.0, 0.1), st.integers(0, 20), st.floats(0.001, 0.1), st.floats(0.0, 0.05)),
        min_size=1,
        max_size=40,
    )
)
def test_the_pace_stays_in_bounds_and_clears_any_gap_it_just_saw(
    steps: list[tuple[float, int, float, float]],
) -> None:
    pace, now = Pace(), 0.0
    for advance, gaps, shortest, span in steps:
        now += advance
        before = pace.seconds
        pace = next_pace(pace, now, gaps, shortest, span)
        assert pace.seconds == UNPACED or PACE_S <= pace.seconds <= MAX_PACE_S
        if not gaps or pace.seconds == UNPACED:
            continue
        # After a read, the pace clears its gaps by the margin; a slower pace than the fastest only
        # where the read's span (or the pace before, had the read no span) did as well, and by half
        # a pace at least.
        assert pace.seconds + SPAN_MARGIN_S <= shortest
        if pace.seconds > PACE_S:
            assert max(span, before) + SPAN_MARGIN_S <= shortest
            assert SPAN_FLOOR * pace.seconds <= shortest


async def paced_run(
    streams: int, tokens: int, gap_s: float, slots: int, *, stall_s: float = 0.0
) -> tuple[list[ProbeResult], set[float]]:
    """``streams`` requests of ``spread_streams`` at once: their results, and every pace the reads took
    meanwhile (looked at every millisecond); ``stall_s``: block the loop that long once, from 0.3 s in,
    at the first look that finds the reads paced."""
    paces: set[float] = set()
    spec = RequestSpec(prompt="x", max_tokens=tokens)
    async with spread_streams(streams, tokens, gap_s, slots) as url:
        settings = TargetSettings(base_url=url, model="m", api="completions", timeouts=TEST_TIMEOUTS)
        async with ProbeClient(settings) as client:
            reads = loop_reads(time.perf_counter)

            async def watch() -> None:
                stall_at = time.perf_counter() + 0.3 if stall_s else math.inf
                while True:
                    paces.add(reads.pace.seconds)
                    if time.perf_counter() >= stall_at and reads.paced:
                        time.sleep(stall_s)  # what a long garbage collection does
                        stall_at = math.inf
                    await asyncio.sleep(0.001)

            watcher = asyncio.ensure_future(watch())
            try:
                sends = (client.send(spec) for _ in range(streams))
                results = await asyncio.wait_for(asyncio.gather(*sends), 30)
            finally:
                watcher.cancel()
    return results, paces


@asynccontextmanager
async def spread_streams(streams: int, tokens: int, gap_s: float, slots: int) -> AsyncIterator[str]:
    """A completions server that streams ``tokens`` chunks ``gap_s`` apart to each of ``streams``
    connections, their phases spread over ``slots`` slots of one gap, so that chunks of some stream
    arrive all the time and the client's reads stay paced (a wake-up finds several sockets ready)."""
    writers: list[asyncio.StreamWriter] = []
    all_in = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lengths = [line for line in head.lower().split(b"\r\n") if line.startswith(b"content-length:")]
        await reader.readexactly(int(lengths[0].split(b":")[1]))
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        writers.append(writer)
        if len(writers) == streams:
            all_in.set()
        await asyncio.sleep(60)  # the sender ends the answer

    def chunk_of(index: int) -> bytes:
        if index == tokens + 1:
            data = b"[DONE]"
        elif index == tokens:
            data = b'{"choices":[{"text":"","finish_reason":"length"}]}'
        else:
            data = b'{"choices":[{"text":"t","finish_reason":null}]}'
        event = b"data: " + data + b"\n\n"
        return b"%x\r\n%s\r\n" % (len(event), event) + (b"0\r\n\r\n" if index == tokens + 1 else b"")

    async def send() -> None:
        await all_in.wait()
        loop = asyncio.get_running_loop()
        start, slot_s = loop.time(), gap_s / slots
        for step in range((tokens + 2) * slots):
            await asyncio.sleep(max(0.0, start + step * slot_s - loop.time()))
            for writer in writers[step % slots :: slots]:
                writer.write(chunk_of(step // slots))

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    sender = asyncio.ensure_future(send())
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        sender.cancel()
        for writer in writers:
            writer.close()
        server.close()


def read_together(results: list[ProbeResult]) -> int:
    """Reads that carried several token events (a run of equal stamps), over every stream, however far
    apart the events came (``multi_event_reads`` counts only those that may have come more than 3 ms
    apart)."""
    return sum(
        b == a != before
        for r in results
        for before, a, b in zip([math.nan, *r.token_times], r.token_times, r.token_times[1:], strict=False)
    )


async def test_streams_with_long_gaps_are_read_at_a_slower_pace_and_never_together(both_reads: str) -> None:
    """Forty streams of 20 ms gaps, spread over the gap: the C reads slow their pace, and no read holds
    two token events."""
    streams, tokens = 40, 50
    results, paces = await paced_run(streams, tokens, gap_s=0.02, slots=10)
    assert all(r.outcome is Outcome.OK for r in results), [r.error for r in results]
    assert [r.output_tokens for r in results] == [tokens] * streams
    # None on a quiet machine; a stall of the loop the server shares makes it write late chunks back
    # to back, which no client separates.
    assert read_together(results) <= 0.01 * streams * tokens
    if both_reads == "native":
        assert max(paces) > PACE_S, paces
    else:
        assert paces == {PACE_S}  # the Python reads see no gaps: they stay at the fastest


async def test_the_lag_monitor_takes_its_samples_from_the_paced_reads_while_they_run() -> None:
    """While the reads are on their timer the client's lag monitor has none of its own (one wake-up of
    the process fewer every 20 ms) and samples theirs; once they stop, its own timer again."""
    seen: list[tuple[bool, bool]] = []  # (paced, the monitor's own timer armed), looked at every ms
    spec = RequestSpec(prompt="x", max_tokens=50)
    async with spread_streams(40, 50, 0.02, 10) as url:
        settings = TargetSettings(base_url=url, model="m", api="completions", timeouts=TEST_TIMEOUTS)
        async with ProbeClient(settings) as client:
            reads, monitor = loop_reads(time.perf_counter), client.monitor
            assert monitor is not None

            async def watch() -> None:
                while True:
                    seen.append((reads.paced, monitor._handle is not None))
                    await asyncio.sleep(0.001)

            watcher = asyncio.ensure_future(watch())
            mark = monitor.mark()
            try:
                results = await asyncio.wait_for(asyncio.gather(*(client.send(spec) for _ in range(40))), 30)
            finally:
                watcher.cancel()
            sampled = monitor.mark() - mark
    assert all(r.outcome is Outcome.OK for r in results), [r.error for r in results]
    assert any(paced for paced, _ in seen)
    assert not any(paced and armed for paced, armed in seen)
    # One sample per interval, from the paced reads while they ran (the second the streams last).
    assert 0.5 * (50 * 0.02) / SAMPLE_INTERVAL_S < sampled < 1.5 * (50 * 0.02) / SAMPLE_INTERVAL_S, sampled


async def test_streams_faster_than_any_pace_are_read_unpaced_and_never_together(both_reads: str) -> None:
    """Four streams of 2 ms gaps (500 tokens a second), two at a time: a fixed 2 ms pace read about a
    quarter of their chunks two at a time; the C reads see the short gaps and stop pacing."""
    streams, tokens = 4, 150
    results, paces = await paced_run(streams, tokens, gap_s=0.002, slots=2)
    assert all(r.outcome is Outcome.OK for r in results), [r.error for r in results]
    if both_reads == "native":
        assert UNPACED in paces, paces
        # At a 2 ms pace a quarter of the reads held two chunks. The server shares this test's loop: a
        # stall of it makes the server write a stream's late chunks back to back, which no client
        # separates, so a busy machine may show a few.
        shared = read_together(results)
        assert shared <= 0.1 * streams * tokens, shared


async def test_a_stall_of_the_loop_while_reads_are_paced_is_each_requests_loop_lag(both_reads: str) -> None:
    """A stall of 30 ms: the lag monitor's timer, due every 20 ms, sees it late by at least 22 ms only
    four times in ten; the paced reads' own timer, due every pace (at most 8 ms), always does."""
    streams, tokens = 40, 50
    start = time.perf_counter()
    results, _ = await paced_run(streams, tokens, gap_s=0.02, slots=10, stall_s=0.03)
    assert all(r.outcome is Outcome.OK for r in results), [r.error for r in results]
    assert loop_reads(time.perf_counter).late.since(start) >= 0.03 - MAX_PACE_S
    assert all(r.loop_lag_s >= 0.03 - MAX_PACE_S for r in results), sorted(r.loop_lag_s for r in results)


async def test_bytes_that_waited_through_a_stall_say_how_long_it_was(both_reads: str) -> None:
    """Reads woken by readability have no timer to be late: the bytes that waited in the socket while
    the loop was blocked are the evidence."""
    reads = loop_reads(time.perf_counter)
    with stamped_pair(reads) as (stamped, server, protocol):
        stamped.start()
        start = time.perf_counter()
        server.sendall(b"x")
        time.sleep(0.03)  # the loop is blocked (a long garbage collection): the byte waits
        for _ in range(1000):
            if protocol.reads:
                break
            await asyncio.sleep(0.001)
        assert [data for _, data in protocol.reads] == [b"x"] and not reads.paced
        assert reads.late.since(start) >= 0.025


def test_late_reads_keep_the_most_since_any_moment() -> None:
    late = LateReads()
    late.note(10.0, LATE_READ_S / 2)  # the timer's own grain: not late
    assert late.since(0.0) == 0.0
    late.note(11.0, 0.010)
    late.note(12.0, 0.005)
    assert late.since(0.0) == 0.010
    assert late.since(11.5) == 0.005  # only what came from then on
    assert late.since(12.5) == 0.0
    for k in range(100_000):  # a long saturated run: an early stall is not forgotten
        late.note(100.0 + k * 0.002, 0.002 + (k % 7) * 1e-4)
    assert late.since(0.0) == 0.010 and late.since(50.0) == pytest.approx(0.0026)
    late.note(400.0, 0.030)
    assert late.since(0.0) == late.since(399.0) == 0.030
    assert len(late._late) == 1  # nothing earlier was later: one value kept
