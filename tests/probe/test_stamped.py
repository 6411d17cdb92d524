"""Kernel receive stamps: a read that comes late is still stamped when its bytes arrived.

The servers here are plain blocking sockets in a thread, so they keep writing while the client's event
loop is blocked on purpose (what a saturated or CPU-throttled client does)."""

from __future__ import annotations

import asyncio
import json
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from exporter.probe import socket_reads
from exporter.probe.client import ProbeClient
from exporter.probe.socket_reads import (
    EARLY_STAMP_S,
    OFFSET_BRACKET_S,
    OFFSET_TRIES,
    NativeSocketReads,
    SocketReads,
    early_stamp,
    kernel_stamps_available,
    kernel_stamps_on,
    kernel_time,
    listen_to_paced_reads,
    loop_reads,
    monotonic_stamp,
    stop_listening,
)
from exporter.probe.stamped import StampedSocket
from exporter.settings.target import TargetSettings
from exporter.streams.request import RequestSpec, Timeouts
from exporter.streams.result import Outcome, ProbeResult
from tests.probe.helpers import RecordingProtocol, stamped_pair, wall_offset
from tests.support.wait import wait_for

pytestmark = [
    pytest.mark.skipif(
        not kernel_stamps_available(time.perf_counter),
        reason="kernel receive stamps are Linux x86_64/arm64 only",
    ),
    pytest.mark.usefixtures("both_reads"),
]
TIMEOUTS = Timeouts(connect=5.0, ttft=10.0, idle=10.0, total=30.0)
HEADERS = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def frame(obj: object) -> bytes:
    payload = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def token(text: str) -> bytes:
    return frame({"choices": [{"text": text, "finish_reason": None}]})


END = frame({"choices": [{"text": "", "finish_reason": "length"}]}) + frame(b"[DONE]") + b"0\r\n\r\n"


def read_request(conn: socket.socket) -> bytes:
    """The request's body (its head read up to the blank line, then Content-Length bytes)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += conn.recv(1 << 20)
    return body


@contextmanager
def thread_server(respond: Callable[[socket.socket], None]) -> Iterator[str]:
    """A one-connection server on 127.0.0.1 answering with ``respond`` in a thread."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(20)

    def serve() -> None:
        with listener, listener.accept()[0] as conn:
            respond(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        thread.join(timeout=20)


def settings(url: str) -> TargetSettings:
    return TargetSettings(base_url=url, api="completions", model="m", timeouts=TIMEOUTS)


def test_kernel_time_reads_the_timestamp_item_onto_the_monotonic_clock() -> None:
    stamp = struct.pack("@qq", 1_700_000_000, 250_000_000)
    other = (socket.SOL_SOCKET, 1, b"\x00" * 16)
    assert kernel_time([other, (socket.SOL_SOCKET, 35, stamp)], 1_699_999_000.0) == pytest.approx(1000.25)
    assert kernel_time([other], 0.0) is None
    assert kernel_time([], 0.0) is None


def test_a_reads_stamp_is_the_kernels_unless_missing_or_after_the_present_and_never_goes_back() -> None:
    assert monotonic_stamp(5.0, now=6.0, previous=4.0) == 5.0
    assert monotonic_stamp(None, now=6.0, previous=4.0) == 6.0  # no kernel stamp: the wake-up's
    assert monotonic_stamp(7.0, now=6.0, previous=4.0) == 6.0  # after the present: a wall-clock step
    assert monotonic_stamp(3.0, now=6.0, previous=4.0) == 4.0  # before the socket's previous read


def test_a_stamp_before_the_last_poll_that_found_nothing_on_its_socket_is_early() -> None:
    assert early_stamp(5.0, readable_after=5.5)
    assert early_stamp(5.5 - EARLY_STAMP_S * 1.01, readable_after=5.5)
    assert not early_stamp(5.5 - EARLY_STAMP_S / 2, readable_after=5.5)  # a deferred softirq, say
    assert not early_stamp(None, readable_after=5.5) and not early_stamp(5.0, readable_after=0.0)


async def test_an_impossibly_early_kernel_stamp_is_moved_to_the_poll_before_and_counted(
    both_reads: str,
) -> None:
    """A retransmission after a lost packet keeps the stamp of the packets that waited for it, so a
    stall of 200 ms and more vanished from the stamps (over a real network; loopback loses nothing).
    Here every stamp is made a second early by the offset the reads are given; the bytes came after a
    poll that found the socket with nothing, so the read's own time is their stamp, as for a read
    without one."""
    reads = loop_reads(time.perf_counter)
    with (
        stamped_pair(reads) as (stamped, server, protocol),
        stamped_pair(reads) as (late, late_server, late_protocol),
    ):
        stamped.start()
        time.sleep(0.002)
        polled = time.perf_counter()
        reads.clocks = lambda: (polled, wall_offset())  # type: ignore[method-assign]
        reads._read_ready()  # nothing to read on it yet
        late.start()  # joined after that poll: it proves nothing about this one
        server.sendall(b"x")
        late_server.sendall(b"y")
        for sock in (stamped.sock, late.sock):  # not awaited: the loop must not read them itself
            assert select.select([sock], [], [], 5)[0], "the byte did not arrive"
        now = time.perf_counter()
        reads.clocks = lambda: (now, wall_offset() + 1.0)  # type: ignore[method-assign]
        assert reads._read_ready() == 2
        after = time.perf_counter()
        assert (stamped.early_stamps(), late.early_stamps()) == (1, 0)
    [(stamp, data)] = protocol.reads
    assert data == b"x" and now <= stamp <= after  # read again when it read (not the wake-up's now)
    [(late_stamp, _)] = late_protocol.reads
    assert late_stamp < polled - 0.5  # kept as the kernel gave it: no poll saw its socket with nothing


def shift_clocks(reads: SocketReads, now: float, by: float) -> None:
    """Make ``reads`` poll at ``now`` and map every kernel stamp ``by`` seconds earlier."""
    reads.clocks = lambda: (now, wall_offset() + by)  # type: ignore[method-assign]


def arrived(*stamped: StampedSocket) -> None:
    """Wait (not awaited: the loop must not read them itself) until each socket can be read."""
    for sock in stamped:
        assert select.select([sock.sock], [], [], 5)[0], "the bytes did not arrive"


async def test_bytes_that_waited_behind_a_full_read_are_not_early(
    both_reads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that filled the buffer left bytes that came before it: their stamp is older than that
    poll, rightly. And a read out of turn (``read_now``) judges its stamp by the last poll as well."""
    monkeypatch.setattr(socket_reads, "READ_BYTES", 4096)
    reads = loop_reads(time.perf_counter)
    with stamped_pair(reads) as (stamped, server, protocol):
        stamped.start()
        time.sleep(0.002)
        server.sendall(b"x" * 5000)
        arrived(stamped)
        time.sleep(0.02)  # the bytes are 20 ms older than the poll
        shift_clocks(reads, time.perf_counter(), 0.0)
        reads._read_ready()
        shift_clocks(reads, time.perf_counter(), 0.0)
        reads._read_ready()  # the rest, older than the poll before by 20 ms: not early
        assert [len(data) for _, data in protocol.reads] == [4096, 904]
        assert stamped.early_stamps() == 0
        server.sendall(b"y")
        arrived(stamped)
        shift_clocks(reads, time.perf_counter(), 1.0)
        reads.read_now(stamped)  # drained before, and a second early: early
        assert stamped.early_stamps() == 1


async def test_only_a_poll_that_read_every_ready_socket_says_the_others_had_nothing(
    both_reads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A protocol's error stops a poll with ready sockets unread: their bytes are older than it, and
    the next poll must not call their stamps early (calling them early made 5 of 6 so)."""
    broken: list[bool] = []
    record = RecordingProtocol.received

    def received(self: RecordingProtocol, now: float, data: bytes) -> None:
        if broken:
            raise RuntimeError("a bug in a protocol")
        record(self, now, data)

    monkeypatch.setattr(RecordingProtocol, "received", received)  # before the C reads take it
    reads = loop_reads(time.perf_counter)
    with (
        stamped_pair(reads) as (first, first_server, first_protocol),
        stamped_pair(reads) as (
            second,
            second_server,
            second_protocol,
        ),
    ):
        first.start()
        second.start()
        time.sleep(0.002)
        shift_clocks(reads, time.perf_counter(), 0.0)
        reads._read_ready()  # nothing yet: a complete poll
        first_server.sendall(b"x")
        second_server.sendall(b"y")
        arrived(first, second)
        time.sleep(0.03)
        broken.append(True)
        shift_clocks(reads, time.perf_counter(), 0.0)
        with pytest.raises(RuntimeError, match="a bug in a protocol"):
            reads._read_ready()  # stopped at the first ready socket
        broken.clear()
        shift_clocks(reads, time.perf_counter(), 0.0)
        reads._read_ready()
        assert first.early_stamps() == second.early_stamps() == 0
    assert len(first_protocol.reads + second_protocol.reads) == 1  # the one the error left


class PaceListener:
    """What a lag monitor is told by the reads (``listen_to_paced_reads``), recorded."""

    def __init__(self) -> None:
        self.told: list[bool | float] = []

    def paced(self, on: bool) -> None:
        self.told.append(on)

    def paced_read(self, late_by: float) -> None:
        self.told.append(late_by)


async def test_listeners_are_told_when_the_reads_go_on_their_timer_and_off_it() -> None:
    reads = loop_reads(time.perf_counter)
    listener = PaceListener()
    assert listen_to_paced_reads(listener) is False
    try:
        with stamped_pair(reads) as (one, one_server, _), stamped_pair(reads) as (two, two_server, _):
            one.start()
            two.start()
            one_server.sendall(b"x")
            two_server.sendall(b"y")
            arrived(one, two)
            reads._on_ready()  # two ready: on the timer
            assert reads.paced and listener.told == [True]
            assert listen_to_paced_reads(PaceListener()) is True
            reads._tick_handle.cancel()  # type: ignore[union-attr]
            reads._tick()  # nothing ready: back to readability
            assert not reads.paced
            assert (
                len(listener.told) == 3 and isinstance(listener.told[1], float) and listener.told[2] is False
            )
            one_server.sendall(b"x")
            two_server.sendall(b"y")
            arrived(one, two)
            reads._on_ready()
            assert listener.told[-1] is True
        await asyncio.sleep(0)  # the sockets' close, soon
        assert listener.told[-1] is False  # the last socket closed: off the timer
    finally:
        stop_listening(listener, asyncio.get_running_loop())


async def test_a_request_with_an_impossibly_early_stamp_is_flagged_and_its_gaps_doubted(
    both_reads: str,
) -> None:
    """What a retransmission does to one request, every stamp after its first token made a second
    early: each is stamped when it was read instead, counted on the result, and the request flagged,
    with the two gaps around each such read doubted (``saturation.py``)."""
    first_token = threading.Event()

    def respond(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(HEADERS + token(" a"))
        first_token.wait(5)
        for text in (" b", " c", " d"):
            time.sleep(0.02)
            conn.sendall(token(text))
        conn.sendall(END)

    with thread_server(respond) as url:
        async with ProbeClient(settings(url)) as client:
            sending = asyncio.ensure_future(client.send(RequestSpec(prompt="hi", max_tokens=4)))
            await wait_for(lambda: bool(loop_reads(time.perf_counter).sockets), what="the connection")
            reads = loop_reads(time.perf_counter)
            await asyncio.sleep(0.2)  # the headers and the first token are read, with true stamps
            clocks = reads.clocks
            reads.clocks = lambda: (clocks()[0], clocks()[1] + 1.0)  # type: ignore[method-assign]
            first_token.set()
            result = await asyncio.wait_for(sending, 10)
    assert result.outcome is Outcome.OK and result.output_tokens == 4, result.error
    assert result.kernel_stamps
    assert result.early_stamps >= 3  # " b", " c", " d" (the end's reads may be too)
    assert result.unreliable
    assert result.doubtful_gaps == min(2 * result.early_stamps, result.token_events)
    assert result.token_times == sorted(result.token_times)
    assert result.token_times[1] - result.token_times[0] > 0.1  # not a second before the first token


def test_the_stamps_are_confirmed_in_a_few_tries_however_late() -> None:
    """A process stopped for longer than the confirmation's wait (a profiler's samples) must not read
    without kernel stamps for its whole life: a few tries are made whatever the clock says."""
    assert kernel_stamps_on()
    assert socket_reads._tcp_reads_stamped(time.monotonic() - 1.0)


def test_once_stamps_are_on_the_first_read_of_a_new_socket_has_one() -> None:
    """Linux turns stamping on a little after the first socket asks, and off when the last one closes:
    a server that wrote at once left no stamp on about half of such first reads, which CI once caught
    here. ``kernel_stamps_on`` holds them on for the process."""
    assert kernel_stamps_on()
    for _ in range(50):
        with socket.create_server(("127.0.0.1", 0)) as listener:
            client = socket.create_connection(listener.getsockname())
            server, _ = listener.accept()
        with client, server:
            client.setsockopt(socket.SOL_SOCKET, 35, 1)
            server.sendall(b"x")  # at once: a stamp only if stamping was already on
            client.settimeout(5)
            _data, ancillary, _flags, _address = client.recvmsg(1, 64)
            assert kernel_time(ancillary, 0.0) is not None


def test_a_wall_clock_read_between_far_apart_monotonic_reads_keeps_the_last_clean_offset() -> None:
    """A preemption between the monotonic and the wall-clock read would shift every stamp of the
    wake-up by its length (a capacity trial on a busy machine once saw a stream end 7.5 ms before its
    last token): such an offset is not used."""
    ticks = iter([100.0, 100.0 + OFFSET_BRACKET_S / 2, 200.0, 200.010])  # the second read: 10 ms apart
    loop = asyncio.new_event_loop()
    try:
        reads = SocketReads(loop, lambda: next(ticks))
        now, clean = reads.clocks()
        assert now == 100.0 + OFFSET_BRACKET_S / 2
        assert clean == pytest.approx(time.time() - 100.0, abs=0.5)
        now, offset = reads.clocks()
        assert now == 200.010 and offset == clean
    finally:
        loop.close()


@pytest.mark.parametrize(
    ("ticks", "expected_now"),
    [
        ([100.0, 100.010, 200.0, 200.0 + OFFSET_BRACKET_S / 2], 200.0 + OFFSET_BRACKET_S / 2),  # then clean
        ([0.0, 0.010] * (OFFSET_TRIES - 1) + [300.0, 300.002], 300.002),  # never: the tightest
    ],
)
def test_the_first_offset_is_read_again_until_clean(ticks: list[float], expected_now: float) -> None:
    """No earlier clean offset stands in for the first: it is tried again (a preemption then would shift
    every stamp until the next clean read), and taken from the tightest bracket when none was clean."""
    clock = iter(ticks)
    loop = asyncio.new_event_loop()
    try:
        reads = SocketReads(loop, lambda: next(clock))
        now, offset = reads.clocks()
        assert now == expected_now and next(clock, None) is None  # every try was read, no more
        assert offset == pytest.approx(time.time() - expected_now, abs=0.5)
    finally:
        loop.close()


@pytest.mark.parametrize("kernel_stamps", [True, False])
async def test_a_token_that_arrives_while_the_loop_is_blocked_keeps_its_arrival_time(
    kernel_stamps: bool,
) -> None:
    blocked, unblocked = threading.Event(), threading.Event()
    written: list[float] = []

    def respond(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(HEADERS + token(" a"))
        assert blocked.wait(10)
        written.append(time.perf_counter())
        conn.sendall(token(" b"))
        assert unblocked.wait(10)
        # Apart from " b": bytes that wait in the socket together are read together, and a read
        # carries the stamp of its last packet (what the saturation rule's coalesced reads catch).
        time.sleep(0.1)
        conn.sendall(END)

    started: list[ProbeResult] = []

    async def block_after_first_token() -> None:
        while not (started and started[0].token_times):
            await asyncio.sleep(0.001)
        blocked.set()
        time.sleep(0.2)  # the loop is blocked: " b" arrives meanwhile
        unblocked.set()

    with thread_server(respond) as url:
        async with ProbeClient(settings(url), kernel_stamps=kernel_stamps) as client:
            result, _ = await asyncio.wait_for(
                asyncio.gather(
                    client.send(RequestSpec(prompt="hi", max_tokens=2), on_start=started.append),
                    block_after_first_token(),
                ),
                timeout=30,
            )
    assert result.outcome is Outcome.OK, result.error
    assert result.kernel_stamps is kernel_stamps
    lateness = result.token_times[1] - written[0]
    if kernel_stamps:
        assert -0.005 < lateness < 0.05  # when it arrived
        assert not result.unreliable  # the loop's lag did not touch the stamps
    else:
        assert lateness >= 0.15  # when the blocked loop got round to it
        assert result.unreliable


async def test_bytes_that_came_while_the_wake_up_read_keep_the_kernels_stamp() -> None:
    """At 300 streams a wake-up reads for ms; bytes that came meanwhile are later than its start, and
    taking the start for them made gaps up to 6 ms short (the Python reads; ``test_native_reads``: C)."""
    reads = SocketReads(asyncio.get_running_loop(), time.perf_counter)
    with stamped_pair(reads) as (stamped, server, protocol):
        woke, offset = time.perf_counter(), wall_offset()
        server.sendall(b"x")
        sent = time.perf_counter()
        await asyncio.sleep(0.01)
        reads.read(stamped, woke, offset)
        [(stamp, _)] = protocol.reads
        assert woke < stamp and sent - 0.005 <= stamp <= time.perf_counter() - 0.005


async def test_a_request_larger_than_the_socket_buffer_is_sent_whole() -> None:
    prompt = "x" * 4_000_000
    received: list[int] = []

    def respond(conn: socket.socket) -> None:
        received.append(len(json.loads(read_request(conn))["prompt"]))
        conn.sendall(HEADERS + token(" a") + END)

    with thread_server(respond) as url:
        async with ProbeClient(settings(url)) as client:
            result = await asyncio.wait_for(client.send(RequestSpec(prompt=prompt, max_tokens=1)), timeout=30)
    assert result.outcome is Outcome.OK, result.error
    assert result.kernel_stamps
    assert received == [len(prompt)]


async def test_a_server_that_closes_mid_stream_is_a_partial_stream() -> None:
    def respond(conn: socket.socket) -> None:
        read_request(conn)
        conn.sendall(HEADERS + token(" a") + token(" b"))

    with thread_server(respond) as url:
        async with ProbeClient(settings(url)) as client:
            result = await asyncio.wait_for(client.send(RequestSpec(prompt="hi", max_tokens=4)), timeout=30)
    assert result.outcome is Outcome.STREAM_ABORTED
    assert result.output_tokens == 2


async def test_a_close_right_after_an_answer_is_seen_before_the_connection_is_reused() -> None:
    """llama-server closes the connection right after a streamed answer. Paced reads may not have read
    that FIN yet when the next request takes the connection from the pool: it is read then, and the
    request opens a fresh connection at once instead of failing on the closed one and being resent."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(20)
    answered, closed = threading.Event(), threading.Event()
    connections: list[int] = []

    def serve() -> None:
        with listener:
            for index in range(2):
                conn = listener.accept()[0]
                connections.append(index)
                read_request(conn)
                conn.sendall(HEADERS + token(" a") + END)
                answered.wait(10)  # the client has its answer: the FIN comes after the last read
                conn.close()
                closed.set()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    async with ProbeClient(settings(url)) as client:
        first = await asyncio.wait_for(client.send(RequestSpec(prompt="hi", max_tokens=1)), timeout=30)
        # Blocking the loop until the server has closed: the FIN waits in the socket, unread by the
        # loop, when the next request asks the pool for a connection.
        answered.set()
        assert closed.wait(10)
        second = await asyncio.wait_for(client.send(RequestSpec(prompt="hi", max_tokens=1)), timeout=30)
    thread.join(timeout=20)
    assert first.outcome is Outcome.OK and second.outcome is Outcome.OK, (first.error, second.error)
    assert second.kernel_stamps
    assert second.retries == 0  # not written to the closed connection first
    assert connections == [0, 1]


async def test_the_loop_reads_its_sockets_the_way_the_install_chose(both_reads: str) -> None:
    reads = loop_reads(time.perf_counter)
    assert isinstance(reads, NativeSocketReads) == (both_reads == "native")


async def test_a_protocol_that_raises_does_not_stop_the_paced_reads() -> None:
    """A bug in one protocol reaches the loop's exception handler; the other sockets are still read."""
    loop = asyncio.get_running_loop()
    errors: list[dict[str, object]] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    reads = loop_reads(time.perf_counter)
    got: list[bytes] = []

    class Protocol:
        def __init__(self, broken: bool) -> None:
            self.broken = broken
            self.seen = 0

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            pass

        def received(self, now: float, data: bytes) -> None:
            if self.broken and self.seen:  # from its second read, once reads are on the timer
                raise RuntimeError("a bug")
            self.seen += 1
            if not self.broken:
                got.append(data)

        def connection_lost(self, exc: Exception | None) -> None:
            pass

    with socket.create_server(("127.0.0.1", 0)) as listener:
        pairs, protocols = [], [Protocol(broken=True), Protocol(broken=False)]
        for protocol in protocols:
            client = socket.create_connection(listener.getsockname())
            client.setblocking(False)
            stamped_socket = StampedSocket(client, protocol, reads)
            stamped_socket.start()
            pairs.append((stamped_socket, listener.accept()[0]))
        for _, server in pairs:
            server.sendall(b"1")
        # Both read on readiness, together: reading moves to the timer for PACE_S (so no wait_for
        # here: its polling would let the timer lapse before the next bytes come).
        for _ in range(10_000):
            if all(protocol.seen for protocol in protocols):
                break
            await asyncio.sleep(0)
        assert all(protocol.seen for protocol in protocols)
        for _, server in pairs:
            server.sendall(b"2")  # read by the timer: the broken protocol raises there
        await wait_for(lambda: bool(errors) and b"2" in got, timeout=10, what="the second reads")
        pairs[1][1].sendall(b"3")
        await wait_for(lambda: b"3" in got, timeout=10, what="the healthy socket's third read")
        for stamped_socket, server in pairs:
            stamped_socket.abort()
            server.close()
    assert any("a bug" in str(context.get("exception")) for context in errors)
    assert got == [b"1", b"2", b"3"]  # the healthy socket kept being read
