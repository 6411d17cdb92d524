"""The stamped reads in C (``exporter/probe/_reads.c``), on real loopback TCP sockets: what a read
hands to the protocol, what keep mode keeps and what it refuses, the stamps, and the end of a socket.

The client's whole path through them is tested with the Python reads beside (``both_reads`` in
``test_stamped.py``, ``test_client_http.py`` and ``test_client_faults.py``); these tests pin the rules
of ``_reads.c`` one by one, with no event loop: each calls ``read`` itself."""

from __future__ import annotations

import math
import select
import socket
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

from exporter.probe import socket_reads
from tests.probe.helpers import wall_offset

if TYPE_CHECKING:
    from exporter.probe._reads import Reads

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the C reads are built for Linux only")

MARKERS = (b"[DONE]", b'"error"')


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(payload: bytes) -> bytes:
    return chunk(b"data: " + payload + b"\n\n")


@dataclass
class Sink:
    """What the reads call: ``received``, ``lose`` and keep mode's ``due``, recorded."""

    received: list[tuple[float, bytes]] = field(default_factory=list)
    lost: list[BaseException | None] = field(default_factory=list)
    due_calls: int = 0
    last_read: float = 0.0  # keep mode writes each kept read's stamp here

    def on_received(self, now: float, data: bytes) -> None:
        self.received.append((now, data))

    def on_lose(self, exc: BaseException | None) -> None:
        self.lost.append(exc)

    def due(self) -> None:
        self.due_calls += 1


@dataclass
class Pair:
    reads: Reads
    client: socket.socket
    server: socket.socket
    sink: Sink

    @property
    def fd(self) -> int:
        return self.client.fileno()

    def send(self, data: bytes) -> None:
        """Write ``data`` from the server and wait until the client's socket can read it."""
        self.server.sendall(data)
        assert select.select([self.client], [], [], 5)[0], "the bytes did not arrive"

    def read(self, now: float | None = None) -> float:
        """One read by the C reads; returns the ``now`` it was given."""
        now = time.perf_counter() if now is None else now
        self.reads.read(self.fd, now, wall_offset())
        return now


@pytest.fixture
def pair() -> Iterator[Pair]:
    """A connected loopback TCP pair, the client's end non-blocking, stamped and in a C ``Reads``."""
    if socket_reads._native is None:
        pytest.fail("exporter.probe._reads was not built: reinstall with a C compiler (pip install -e .)")
    assert socket_reads.SO_TIMESTAMPNS is not None
    assert socket_reads.kernel_stamps_on(), "the kernel gave no receive stamp"
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    client.setblocking(False)
    client.setsockopt(socket.SOL_SOCKET, socket_reads.SO_TIMESTAMPNS, 1)
    sink = Sink()
    reads = socket_reads._native.Reads(socket_reads.SO_TIMESTAMPNS, 4096, socket_reads.GAP_FLOOR_S)
    reads.add(client.fileno(), sink.on_received, sink.on_lose)
    try:
        yield Pair(reads, client, server, sink)
    finally:
        reads.close()
        client.close()
        server.close()


def keep(pair: Pair, kept: list[object], *, due_at: int = 100, max_data: int = 1000) -> None:
    pair.reads.keep(pair.fd, kept, pair.sink, pair.sink.due, MARKERS, due_at, max_data)


def keeping(pair: Pair) -> bool:
    return bool(pair.reads.keeping(pair.fd))


def test_a_read_goes_to_the_protocol_with_the_kernels_stamp(pair: Pair) -> None:
    sent = time.perf_counter()
    pair.send(b"hello")
    time.sleep(0.02)
    now = pair.read()
    [(stamp, data)] = pair.sink.received
    assert data == b"hello"
    # The kernel's receive time, not the read's: 20 ms before it (the wall-clock mapping is within ms).
    assert sent - 0.005 <= stamp <= now - 0.015


def test_stamps_never_go_back_nor_past_the_present(pair: Pair) -> None:
    offset = wall_offset()
    pair.send(b"a")
    first = pair.read()
    pair.send(b"b")
    pair.read(now=first - 10.0)  # bytes that came after the wake-up began: the kernel's stamp stays
    pair.send(b"c")
    step = time.perf_counter()
    pair.reads.read(pair.fd, step, offset - 100.0)  # the wall clock stepped back: the stamp is 100 s ahead
    pair.send(b"d")
    pair.reads.read(pair.fd, time.perf_counter(), offset + 100.0)  # a stamp before the last one
    (a, _), (b, _), (c, _), (d, _) = pair.sink.received
    assert a <= first < b <= step
    assert step <= c <= time.perf_counter()  # the present, read again
    assert d == c


def test_nothing_waiting_is_nothing_and_the_end_of_the_stream_is_lost_none(pair: Pair) -> None:
    pair.read()
    assert pair.sink.received == [] and pair.sink.lost == []
    pair.server.shutdown(socket.SHUT_WR)
    assert select.select([pair.client], [], [], 5)[0]
    pair.read()
    assert pair.sink.lost == [None]


def test_a_reset_is_lost_with_its_error(pair: Pair) -> None:
    pair.server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    pair.server.close()
    assert select.select([pair.client], [], [], 5)[0]
    pair.read()
    [error] = pair.sink.lost
    assert isinstance(error, ConnectionResetError)


def test_keep_mode_keeps_whole_chunks_of_one_lone_event_as_their_data(pair: Pair) -> None:
    kept: list[object] = []
    keep(pair, kept, due_at=2)
    pair.send(event(b'{"t": 1}'))
    first = pair.read()
    assert len(kept) == 1 and pair.sink.due_calls == 0
    stamp, data = kept[0]  # type: ignore[misc]
    assert data == b'{"t": 1}' and stamp <= first
    assert pair.sink.last_read == stamp  # the idle limit sees the kept read
    pair.send(event(b'{"t": 2}'))
    pair.read()
    assert [d for _, d in kept] == [b'{"t": 1}', b'{"t": 2}']  # type: ignore[misc]
    assert pair.sink.due_calls == 1  # due once the list holds due_at reads
    assert pair.sink.received == [] and keeping(pair)


@pytest.mark.parametrize(
    "read",
    [
        pytest.param(event(b"[DONE]"), id="an end marker"),
        pytest.param(event(b'{"error": {"message": "x"}}'), id="an error object"),
        pytest.param(chunk(b"data: {}\n\ndata: {}\n\n"), id="two events"),
        pytest.param(chunk(b'data: {"a":\ndata: 1}\n\n'), id="two data lines"),
        pytest.param(chunk(b"event: x\ndata: {}\n\n"), id="an event type"),
        pytest.param(chunk(b"data: {}\r\n\r\n"), id="CRLF line ends"),
        pytest.param(chunk(b"data: {}\n"), id="an event not ended"),
        pytest.param(event(b"{}") + event(b"{}"), id="two chunks"),
        pytest.param(event(b'{"t": 1}')[:-3], id="part of a chunk"),
        pytest.param(b"5;ext=1\r\ndata:\r\n", id="a chunk extension"),
        pytest.param(b"0\r\n\r\n", id="the last chunk"),
        pytest.param(b"zz\r\ndata: {}\n\n\r\n", id="no chunk size"),
        pytest.param(event(b"x" * 2000), id="longer than max_data"),
    ],
)
def test_keep_mode_hands_any_other_read_to_the_protocol_and_ends(pair: Pair, read: bytes) -> None:
    kept: list[object] = []
    keep(pair, kept)
    pair.send(read)
    pair.read()
    assert kept == []
    assert [data for _, data in pair.sink.received] == [read]
    assert not keeping(pair)  # http.py turns it on again once the parser is between chunks


TEMPLATE = [b'{"id": "c1", "choices": [{"text": "', b'", "finish_reason": null}]}']


def keep_templated(pair: Pair, kept: list[object], template: list[bytes]) -> None:
    pair.reads.keep(pair.fd, kept, pair.sink, pair.sink.due, MARKERS, 100, 1000, template)


def templated(content: bytes) -> bytes:
    return TEMPLATE[0] + content + TEMPLATE[1]


def test_a_chunk_that_differs_from_the_template_in_its_text_alone_is_kept_as_that_text(pair: Pair) -> None:
    kept: list[object] = []
    keep_templated(pair, kept, TEMPLATE)
    for content in (b" Hello", b" w\xc3\xb6rld", b"\x7f"):
        pair.send(event(templated(content)))
        pair.read()
    assert [text for _, text in kept] == [" Hello", " w\u00f6rld", "\x7f"]  # type: ignore[misc]
    assert pair.sink.last_read == kept[-1][0]  # type: ignore[index]
    assert pair.sink.received == [] and keeping(pair)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(templated(b'say \\"hi\\"'), id="an escaped quote"),
        pytest.param(templated(b"a\\nb"), id="an escape"),
        pytest.param(templated(b"tab\tin it"), id="a control character"),
        pytest.param(templated(b""), id="no text"),
        pytest.param(templated(b"\xff\xfe"), id="not UTF-8"),
        pytest.param(templated(b' a", "text": "b'), id="a quote: another field"),
        pytest.param(b'{"id": "c2", "choices": [{"text": " a", "finish_reason": null}]}', id="another id"),
        pytest.param(TEMPLATE[0] + b" a", id="no suffix"),
    ],
)
def test_any_other_event_data_is_kept_as_it_came(pair: Pair, data: bytes) -> None:
    """Left to the reader's decoder, which judges it as it judges every chunk."""
    kept: list[object] = []
    keep_templated(pair, kept, TEMPLATE)
    pair.send(event(data))
    pair.read()
    assert kept == [(kept[0][0], data)]  # type: ignore[index]
    assert keeping(pair)


def test_the_reader_may_change_the_template_between_reads(pair: Pair) -> None:
    kept: list[object] = []
    template: list[bytes] = []  # none yet: data
    keep_templated(pair, kept, template)
    pair.send(event(templated(b" a")))
    pair.read()
    template[:] = TEMPLATE  # the reader found one
    pair.send(event(templated(b" b")))
    pair.read()
    template[:] = [b"not", b"bytes"][:1]  # not a pair: none
    pair.send(event(templated(b" c")))
    pair.read()
    template[:] = ["prefix", "suffix"]  # type: ignore[list-item]  # not bytes: none
    pair.send(event(templated(b" d")))
    pair.read()
    assert [item for _, item in kept] == [templated(b" a"), " b", templated(b" c"), templated(b" d")]  # type: ignore[misc]


def test_unkeep_and_remove_end_keep_mode_and_a_removed_socket_is_not_read(pair: Pair) -> None:
    kept: list[object] = []
    keep(pair, kept)
    pair.reads.unkeep(pair.fd)
    pair.send(event(b"{}"))
    pair.read()
    assert kept == [] and len(pair.sink.received) == 1
    keep(pair, kept)
    pair.reads.remove(pair.fd)
    assert not keeping(pair)
    pair.send(event(b"{}"))
    pair.read()
    assert kept == [] and len(pair.sink.received) == 1
    pair.reads.remove(pair.fd)  # twice: no error


def test_a_callback_that_removes_its_socket_is_safe(pair: Pair) -> None:
    def lose(exc: BaseException | None) -> None:
        pair.reads.remove(pair.fd)  # what StampedSocket.lose does
        pair.sink.lost.append(exc)

    pair.reads.remove(pair.fd)
    pair.reads.add(pair.fd, pair.sink.on_received, lose)
    pair.server.shutdown(socket.SHUT_WR)
    assert select.select([pair.client], [], [], 5)[0]
    pair.reads.read_ready(time.perf_counter(), wall_offset())
    assert pair.sink.lost == [None]


def test_read_ready_reads_every_ready_socket_once(pair: Pair) -> None:
    pair.send(b"one")
    ready = pair.reads.read_ready(time.perf_counter(), wall_offset())
    assert ready == 1 and [d for _, d in pair.sink.received] == [b"one"]
    assert pair.reads.read_ready(time.perf_counter(), 0.0) == 0


def test_a_callback_error_reaches_the_caller(pair: Pair) -> None:
    def broken(now: float, data: bytes) -> None:
        raise RuntimeError("a bug in the protocol")

    pair.reads.remove(pair.fd)
    pair.reads.add(pair.fd, broken, pair.sink.on_lose)
    pair.send(b"x")
    with pytest.raises(RuntimeError, match="a bug in the protocol"):
        pair.read()


def test_a_state_whose_setattr_ends_keep_mode_is_safe(pair: Pair) -> None:
    """Python code run while a read is kept (here a ``__setattr__`` that ends keep mode) once crashed
    the process: the C side read the entry after it was cleared; reproduced here."""
    kept: list[object] = []

    class State:
        def __setattr__(self, name: str, value: object) -> None:
            pair.reads.unkeep(pair.fd)

    pair.reads.keep(pair.fd, kept, State(), pair.sink.due, MARKERS, 1, 1000)
    pair.send(event(b"{}"))
    pair.read()
    assert len(kept) == 1 and pair.sink.due_calls == 1 and not keeping(pair)


def test_gaps_are_counted_between_reads_of_a_kept_stream_only(pair: Pair) -> None:
    """What the pace is chosen by (``socket_reads.next_pace``): the time between two reads of a socket
    in keep mode, a read kept or not (two events read together count too)."""
    pair.send(b"HTTP/1.1 200 OK\r\n\r\n")
    pair.read()  # not in keep mode: no gap
    assert pair.reads.take_gaps() == (0, math.inf)
    keep(pair, [])
    time.sleep(0.02)
    pair.send(event(b"{}"))
    pair.read()  # kept, 20 ms after the headers
    time.sleep(0.005)
    pair.send(event(b"{}") + event(b"{}"))
    pair.read()  # two events together, 5 ms later: counted, and keep mode ends
    count, shortest = pair.reads.take_gaps()
    assert count == 2 and 0.004 <= shortest <= 0.015, shortest
    assert [d.count(b"data:") for _, d in pair.sink.received] == [0, 2]
    assert pair.reads.take_gaps() == (0, math.inf)  # taken: counting starts afresh
    time.sleep(0.005)
    pair.send(event(b"{}"))
    pair.read()  # keep mode ended with the last read: no gap
    assert pair.reads.take_gaps() == (0, math.inf)


def test_gaps_shorter_than_the_floor_are_not_counted(pair: Pair) -> None:
    """A server's own burst (events written together, or within the floor) is no gap any pace separates."""
    assert socket_reads._native is not None and socket_reads.SO_TIMESTAMPNS is not None
    floored = socket_reads._native.Reads(socket_reads.SO_TIMESTAMPNS, 4096, 0.010)
    try:
        floored.add(pair.fd, pair.sink.on_received, pair.sink.on_lose)
        floored.keep(pair.fd, [], pair.sink, pair.sink.due, MARKERS, 100, 1000)
        for pause in (0.0, 0.002, 0.03):
            time.sleep(pause)
            pair.send(event(b"{}"))
            floored.read(pair.fd, time.perf_counter(), wall_offset())
        count, shortest = floored.take_gaps()
        assert count == 1 and 0.025 <= shortest <= 0.1, (count, shortest)  # only the 30 ms gap
    finally:
        floored.close()


def test_bad_arguments_are_refused_with_a_clear_error(pair: Pair) -> None:
    with pytest.raises(TypeError, match="markers must be a tuple of bytes"):
        pair.reads.keep(pair.fd, [], pair.sink, pair.sink.due, ("x",), 1, 1)
    with pytest.raises(ValueError, match="file descriptor -1 out of range"):
        pair.reads.add(-1, pair.sink.on_received, pair.sink.on_lose)
    with pytest.raises(ValueError, match="out of range"):
        pair.reads.add(2**30 + 5, pair.sink.on_received, pair.sink.on_lose)  # once hung, doubling the table
    with pytest.raises(OSError):
        pair.reads.add(1 << 20, pair.sink.on_received, pair.sink.on_lose)  # no such fd: EBADF, nothing grown
    with pytest.raises(RuntimeError, match="initialised already"):
        pair.reads.__init__(35)
    with pytest.raises(ValueError, match="buffer_size must be positive"):
        assert socket_reads._native is not None
        socket_reads._native.Reads(35, 0)
