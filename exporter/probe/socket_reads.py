"""The reads of the probe's kernel-stamped sockets (``stamped.py``): one epoll set per event loop, read in
paced batches, each read with the kernel's receive time.

Why: a stamp taken when the event loop gets round to a socket is as late as the loop is busy, and at a
hundred streams every chunk is its own wake-up of the loop, which is most of a Python client's CPU.
Linux stamps every packet when it arrives (``SO_TIMESTAMPNS``) and hands the stamp of the last packet
a read consumed to ``recvmsg``. With that stamp a read can come late without being *measured* late, so
this module reads all the probe's sockets together: their file descriptors sit in one ``epoll`` set,
and every ready socket is read once (one ``recvmsg`` each) per wake-up. While wake-ups keep finding
more than one socket ready, reading moves from readability to a timer, every ``PACE_S`` (2 ms) at
first, so each wake-up finds several reads waiting instead of one: at most 500 wake-ups a second,
however many streams are in flight, and no watcher to add and remove per wake-up. Against the
ground-truth server (``bench/probe_bench.py``) the stamps are within ~0.1 ms of the server's writes at
the p99.9, with the loop idle or saturated.

What the pacing can cost: two chunks of one stream that arrive within one pace are read together and
share the later stamp (the kernel gives a read one stamp, its last packet's); the reader counts such
reads (``multi_event_reads``: those whose chunks may have come more than 3 ms apart) and the
saturation rule flags a request with too many of them. A wake-up
that found a single ready socket does not pause, so a lone fast stream is read as it comes.

So the pace follows the streams (``next_pace``, a pure function): the C reads note the gap between two
reads of every stream they keep (``_reads.c``), and the Python side notes each paced read's *span*,
from the start of the read before it to its own end (the pace, plus the reading and the timer's
lateness): two chunks of a stream are read together only when both arrive within one span. While
every gap for a quarter of a second cleared the span the slower pace will usually take (it, plus the
moving average of how far spans overrun the pace) by twice ``SPAN_MARGIN_S``, the pace doubles, up to
``MAX_PACE_S`` (8 ms: 125 wake-ups a second); the first gap under its read's span plus the margin
brings it back to 2 ms at once. A stream read together with its next chunk shows gaps of about one
span, so a fast stream that starts beside slow ones costs about one shared stamp, not a run of them
(3 ms streams started beside forty 20 ms ones at an 8 ms pace: two shared stamps in the first, none
in the others, none flagged; the same under the rule before, which wanted gaps of twice the pace;
twenty 3 ms streams started as forty 20 ms ones ended: 33 shared stamps in 1,947 reads, 15 at a fixed
2 ms, none flagged). Why spans and not twice the pace: a server's jitter shortens a 20 ms stream's gap
under 16 ms about once in 300, so at a hundred such streams the old rule fell back to 2 ms several
times a second and read a third of the time at 2 ms and another at 4 ms; measured at 100 streams,
interleaved, five runs each: 31.1 -> 29.3 us of CPU per chunk (with the lag monitor's timer folded
into the reads', ``PacedReadsListener``), 2,050 -> 1,500 wake-ups; with the floor of 1.5 paces
(``next_pace``), 28.8 -> 27.8 us and 1,880 -> 1,410. Streams faster than even
the fastest pace separates (a gap under two of ``PACE_S``: 500 tokens a second and more, a small model
or speculative decoding) are not paced at all: the pace drops to ``UNPACED`` and every wake-up of the
loop reads what is ready, as it comes, until a window of gaps at least twice ``PACE_S`` long brings
the pace back (at a fixed 2 ms, 2 ms streams shared a stamp in half of their reads, and 85% of such
requests were flagged). Only kept streams give
gaps: a stream that is never kept (a server whose HTTP chunks do not hold one event each) is read at
the pace the kept ones set, and its shared stamps are counted and flag it as ever. Where it pays:
many streams with long gaps, the batched engine near its capacity that a capacity search measures.
(Measured at 100 streams of 20 ms gaps on this project's VM: ~2-4 us less CPU per chunk than a fixed
2 ms pace, from 700 to 275 context switches a second; a 1 ms pace cost ~2.5 us more than 4 ms. A
wake-up of the process is most of that: an idle uvloop woken every 8 ms spent ~125 us of CPU per
wake-up on this VM, and the client at 100 streams about as much: 1.7 us x 38,400 chunks over 555
wake-ups fewer.)

The kernel stamps ``CLOCK_REALTIME``; ``kernel_time`` maps it onto the client's monotonic clock with the
offset between the two read at the wake-up (a pure function). The wall clock is read between two reads
of the monotonic one, and an offset whose two reads lie more than ``OFFSET_BRACKET_S`` apart (the
process was preempted in between: on a busy machine by several ms, which would shift every stamp of
that wake-up and put a stream's end before its last token) is not used: the last good one is. A
stream's stamps never go back (``monotonic_stamp``). A stamp later than the present (a step of the
wall clock) falls back to the present; one later than the wake-up's start only is kept: its bytes came
while the wake-up read other sockets (at 300 streams a wake-up reads for ms, and taking its start
instead made such gaps up to 6 ms short). A stamp earlier than the last poll of the set that found
its socket with nothing to read is impossible but for a lost packet's retransmission, and is not used
(``early_stamp``): the read is stamped when it is read, and counted. Sockets without a kernel stamp (another
OS, TLS, an injected clock, a kernel that gave no stamp when ``kernel_stamps_on`` held stamping on for
the process) keep the event loop's transports and read-time stamps (``http.py``). The
socket itself, as the transport its protocol writes to, is ``stamped.StampedSocket``.

Where the extension ``_reads.c`` was built (Linux, an install with a C compiler), ``NativeSocketReads``
does the same reading in C: the epoll set, ``recvmsg``, the stamp's arithmetic (the same as
``kernel_time`` and ``monotonic_stamp``) and the hand-over to the protocol, with no Python frame per
read. It adds *keep mode*: once ``http.py`` knows its parser sits between two chunks of a chunked body
and the reader keeps reads for later decoding, a read that is exactly one whole HTTP chunk holding one
lone SSE event goes straight to the reader's list as (stamp, the event's data) (``KeepMode``), or, when
it differs from the stream's template in its text alone, as (stamp, that text), with no JSON decoded
(``chunk_shapes.plain_template``); any other read ends the mode and takes the usual way. Nearly every
token of a stream is such a read, so the client's Python runs per batch of tokens, not per token
(measured: the client's CPU per chunk at 100 streams fell from ~0.5x to ~0.35-0.45x a plain aiohttp
client's; ``bench/probe_bench.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import platform
import select
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final, Protocol
from weakref import WeakKeyDictionary

from exporter.streams.maxima import RunningMaxima

if TYPE_CHECKING:
    from exporter.probe.stamped import StampedSocket

_native: ModuleType | None
try:  # the same reads in C (``_reads.c``): built at install where a compiler is present
    from exporter.probe import _reads as _native
except ImportError:  # pragma: no cover - an install without a compiler
    _native = None

Clock = Callable[[], float]
PACE_S = 0.002  # while busy, how often the sockets are read at first, and at the most often
UNPACED = 0.0  # the pace of streams faster than PACE_S separates: every wake-up reads what is ready
MAX_PACE_S = 0.008  # the least often (see ``next_pace``)
PACE_WINDOW_S = 0.25  # how long the gaps must all have been long before the pace slows
PACE_EVIDENCE = 8  # and how many gaps that window must have seen
SPAN_MARGIN_S = 0.0015  # what the next span of the reads may add to this one (see ``next_pace``)
SPAN_FLOOR = 1.5  # and the least a gap must clear, in paces, however short the spans (see ``next_pace``)
OVERRUN_WEIGHT = 0.05  # of each span in the moving average of their overrun (about the last 20)
GAP_FLOOR_S = 0.001  # shorter gaps are a server's own bursts: no pace separates them
LATE_READ_S = 0.001  # later by less is the timer's own grain (uvloop: 1 ms) or the loop's usual work
OFFSET_BRACKET_S = 50e-6  # a wall-clock read between monotonic reads further apart maps nothing
OFFSET_TRIES = 5  # reads for the first offset, which no earlier clean one can stand in for
# A stamp earlier than its socket could be read by more is not used (early_stamp). Not 1 ms: the
# kernel stamps a packet when it is queued, before the softirq that makes it readable, which a loaded
# machine defers to ksoftirqd or another CPU; what it is for, a retransmission, takes 10 ms and more
# (a tail-loss probe's floor; a timeout's is 200 ms).
EARLY_STAMP_S = 0.010
MAX_READY = 1024  # sockets one poll reads at most (the C reads' MAX_EVENTS)
READ_BYTES = 256 * 1024  # one read's buffer, shared by every socket of a loop (uvloop reads 256 KiB too)
# Python's socket module does not export SO_TIMESTAMPNS; 35 is its value (SO_TIMESTAMPNS_OLD, with a
# 64-bit struct timespec) in Linux's asm-generic/socket.h, which these 64-bit architectures use.
SO_TIMESTAMPNS: int | None = getattr(socket, "SO_TIMESTAMPNS", None) or (
    35 if sys.platform == "linux" and platform.machine() in ("x86_64", "aarch64", "arm64") else None
)
_TIMESPEC = struct.Struct("@qq")  # struct timespec: seconds, nanoseconds
_ANCILLARY_BYTES = socket.CMSG_SPACE(_TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
MONOTONIC_CLOCKS: tuple[Clock, ...] = (time.perf_counter, time.monotonic)  # CLOCK_MONOTONIC on Linux


class StampedProtocol(Protocol):
    """What a stamped socket feeds: ``asyncio.Protocol``'s life cycle, with each read's stamp."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...

    def received(self, now: float, data: bytes) -> None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...


class PacedReadsListener(Protocol):
    """What takes its samples of the loop's lateness from the paced reads while they run, instead of
    from a timer of its own (``saturation.LagMonitor``): each timer is one more wake-up of the process,
    and a wake-up costs ~120 us of CPU on a VM (measured on this project's: an idle uvloop woken every
    8 ms spent 125 us per wake-up), several chunks' worth."""

    def paced(self, on: bool) -> None:
        """The reads went on their timer (``on``) or back to waking on readability."""

    def paced_read(self, late_by: float) -> None:
        """A paced read came ``late_by`` seconds after it was due, or took that long (whatever waited
        behind it waited as long)."""


def kernel_stamps_available(clock: Clock) -> bool:
    """Whether reads can carry kernel receive stamps on ``clock``'s time line."""
    return SO_TIMESTAMPNS is not None and hasattr(select, "epoll") and clock in MONOTONIC_CLOCKS


_STAMPS_HELD: list[socket.socket] = []  # the socket that keeps the kernel's stamps on, once it did
_STAMPS_FAILED: list[bool] = []  # they did not come once: not asked again (each try blocks the loop)
STAMPS_CONFIRM_S = 0.2  # how long kernel_stamps_on waits for its first stamp
# And how many tries it makes at least, however long they take: a process stopped for longer than the
# wait (a profiler's samples, py-spy --native at 400 Hz, once) read without stamps for its whole life.
STAMPS_CONFIRM_TRIES = 20


def kernel_stamps_on() -> bool:
    """Turn the kernel's receive stamps on for the rest of the process and say whether they came.

    Why: Linux stamps packets only while some socket asks for stamps, and the first socket to ask turns
    stamping on a little later, from a work queue (``net_enable_timestamp``); the last one to close turns
    it off again. Until then TCP reads carry no stamp and fall back to their read time, which the pacing
    makes up to a pace late: measured on loopback, with no other socket asking, a server that wrote
    right after the client asked left no stamp on 102 of 200 first reads (none with a held socket).
    So one UDP socket that asks is held open for good, and a byte over a loopback TCP connection shows
    the stamps are on (a datagram would not: UDP stamps one that came unstamped when it is read). On a
    kernel that never stamps TCP, after ``STAMPS_CONFIRM_S``, the caller reads without them, and so do
    later callers: the process does not ask again.
    """
    if _STAMPS_HELD or _STAMPS_FAILED:
        return bool(_STAMPS_HELD)
    assert SO_TIMESTAMPNS is not None
    try:
        with contextlib.ExitStack() as undo:
            held = undo.enter_context(socket.socket(socket.AF_INET, socket.SOCK_DGRAM))
            held.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            if not _tcp_reads_stamped(time.monotonic() + STAMPS_CONFIRM_S):
                _STAMPS_FAILED.append(True)
                return False
            undo.pop_all()
    except OSError:
        _STAMPS_FAILED.append(True)
        return False
    _STAMPS_HELD.append(held)
    return True


def _tcp_reads_stamped(deadline: float) -> bool:
    """Whether a byte sent over a loopback TCP connection is read with a kernel stamp before ``deadline``."""
    assert SO_TIMESTAMPNS is not None
    with (
        socket.create_server(("127.0.0.1", 0)) as listener,
        socket.create_connection(listener.getsockname(), timeout=STAMPS_CONFIRM_S) as reader,
        listener.accept()[0] as writer,
    ):
        reader.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        tries = 0
        while tries < STAMPS_CONFIRM_TRIES or time.monotonic() < deadline:
            tries += 1
            writer.sendall(b"x")
            _data, ancillary, _flags, _address = reader.recvmsg(1, _ANCILLARY_BYTES)
            if kernel_time(ancillary, 0.0) is not None:
                return True
            time.sleep(0.001)
    return False


def kernel_time(ancillary: list[tuple[int, int, bytes]], realtime_offset: float) -> float | None:
    """The ``SCM_TIMESTAMPNS`` stamp among ``recvmsg``'s ancillary items, on the monotonic clock
    (``realtime_offset``: wall clock minus monotonic clock, read together); None when there is none."""
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            return float(seconds + nanoseconds * 1e-9 - realtime_offset)
    return None


def monotonic_stamp(stamp: float | None, now: float, previous: float) -> float:
    """A read's stamp: the kernel's (``stamp``) unless it has none (or one impossibly early, which the
    reader drops: ``early_stamp``) or lies after ``now``, the latest reading of the monotonic clock (a
    step of the wall clock), then ``now``; never before the ``previous`` read of the same socket. (A
    stamp after the wake-up's own ``now`` is no step yet: the bytes may have come while the wake-up
    read the sockets before, so the reader reads the clock again; so it does for a read without a
    stamp.)"""
    chosen = now if stamp is None or stamp > now else stamp
    return chosen if chosen >= previous else previous


def early_stamp(stamp: float | None, readable_after: float) -> bool:
    """Whether the kernel's ``stamp`` is impossibly early: more than ``EARLY_STAMP_S`` before the last
    complete poll of the sockets that found nothing to read on this one (``readable_after``; a step of
    the wall clock forward does the same to every stamp mapped across it).

    Why it happens: the kernel stamps a packet when it arrives, and a read reports the stamp of the
    last packet it took. Over a real network a lost packet leaves the ones after it waiting out of
    order, unreadable, until the retransmission fills the hole; TCP then merges the retransmission
    into them and keeps *their* stamp (``tcp_try_coalesce``), so the read after a retransmission
    timeout (200 ms and more; a tail-loss probe's, 10 ms and more) is stamped as if the stall had not
    happened, for every request. Its bytes became readable between that poll and the read, so the
    read's own time stands for them, as for a read without a stamp: never early; late by at most a span
    of the reads while they are paced, by the loop's lag while they are woken by readability (not the
    poll's time: then the last poll may be seconds before, while the wake-up came with the bytes).
    Loopback never loses a packet: no benchmark here sees it, and at 100-500 streams on loopback no
    stamp was found early, even at 1 ms."""
    return stamp is not None and stamp < readable_after - EARLY_STAMP_S


@dataclass(frozen=True, slots=True)
class Pace:
    """How often the sockets are read while busy (``seconds``), and the evidence gathered for it since
    ``since`` (None: no paced read yet): ``gaps`` gaps between two reads of one kept stream, the
    shortest ``shortest``; and ``overrun``, how much longer than the pace a span of the reads (from the
    start of one paced read to the end of the next) usually is (a moving average, kept across windows)."""

    seconds: float = PACE_S
    since: float | None = None
    gaps: int = 0
    shortest: float = float("inf")
    overrun: float = 0.0


def next_pace(pace: Pace, now: float, gaps: int, shortest: float, span: float = 0.0) -> Pace:
    """The pace after a read that saw ``gaps`` gaps of kept streams, the shortest ``shortest``, and
    took ``span`` seconds from the start of the read before it to its own end (0: not a paced read).

    Two chunks of a stream are read together (and share a stamp) only when both arrive between two
    reads of its socket, within one span; a gap the read saw lies within its span. So a gap shorter
    than this span (at least the pace) plus ``SPAN_MARGIN_S`` (what the next span may add), or than
    ``SPAN_FLOOR`` paces, brings the pace straight back to ``PACE_S``, and one under twice ``PACE_S``
    to ``UNPACED`` (no pace separates it). Not a step down, nor to half that gap: a stream being read
    together shows gaps of about one span, not its own, so each step would cost one more shared stamp.
    The pace slows a step (unpaced, 2 ms, 4 ms, up to ``MAX_PACE_S``) only after ``PACE_WINDOW_S`` in
    which at least ``PACE_EVIDENCE`` gaps were all at least as long as the spans of the slower pace
    will usually be (it plus the ``overrun``) plus twice the margin, and ``SPAN_FLOOR`` slower paces
    plus the margin; from unpaced, twice ``PACE_S``. No gaps seen, no slowing: the reads without keep
    mode (in Python) stay at ``PACE_S``.

    Why spans and not paces: a span is the pace plus the read's own time and the timer's lateness,
    which grow with the streams (at 300 streams a read of the sockets takes milliseconds), and what
    merges two chunks is the span. The rule before this one wanted gaps of twice the pace; the jitter
    of 20 ms streams (a gap under 16 ms in about one of 300) then kept a third of the reads at 2 ms
    and another third at 4 ms, for about 3 us more CPU per chunk than 8 ms at 100 streams. The floor
    of 1.5 paces keeps the slack a late read needs where the mean overrun says little (a model
    of 12 ms streams with 5% of reads 3 ms late: spans alone merged 45 reads in 50,000 where twice
    the pace merged 3): 12 ms streams are read at 4 ms, 14 ms ones at 8 ms with 2 ms to spare."""
    if gaps and shortest < 2 * PACE_S:
        return Pace(UNPACED, now, overrun=pace.overrun)
    overrun = pace.overrun
    if span and pace.seconds:
        overrun += OVERRUN_WEIGHT * (max(span - pace.seconds, 0.0) - overrun)
    if gaps and shortest < max(max(span, pace.seconds) + SPAN_MARGIN_S, SPAN_FLOOR * pace.seconds):
        return Pace(PACE_S, now, overrun=overrun)
    gaps += pace.gaps
    shortest = min(shortest, pace.shortest)
    if pace.since is None or now - pace.since < PACE_WINDOW_S:  # the first window starts at the first read
        return Pace(pace.seconds, now if pace.since is None else pace.since, gaps, shortest, overrun)
    if pace.seconds == UNPACED:
        slower, needed = PACE_S, 2 * PACE_S
    else:
        slower = min(2 * pace.seconds, MAX_PACE_S)
        needed = max(slower + overrun + 2 * SPAN_MARGIN_S, SPAN_FLOOR * slower + SPAN_MARGIN_S)
    if gaps >= PACE_EVIDENCE and shortest >= needed and pace.seconds < MAX_PACE_S:
        return Pace(slower, now, overrun=overrun)
    return Pace(pace.seconds, now, overrun=overrun)


@dataclass(frozen=True, slots=True)
class KeepMode:
    """Where a socket in keep mode puts the reads it takes (``NativeSocketReads.keep``): a read that is
    one whole HTTP chunk holding one lone SSE event (``data: ...`` and a blank line, at most
    ``max_data`` bytes) and none of ``markers`` goes to ``kept`` as (stamp, the event's data), its
    stamp to ``state.last_read``, and ``due()`` is called once ``kept`` holds ``due_at`` reads. While
    ``template`` holds [prefix, suffix] (``chunk_shapes.plain_template``), an event's data that is the
    prefix, JSON string content with nothing escaped, and the suffix is kept as (stamp, that content as
    ``str``): a plain chunk's text, read with no JSON decoded. The reader may change the template
    while the mode lasts (the list is shared, like ``kept``)."""

    kept: list[Any]  # of (stamp, data) and (stamp, text) tuples, with whatever the reader keeps itself
    state: Any  # anything with a float attribute ``last_read`` (``StreamState``)
    due: Callable[[], None]
    markers: tuple[bytes, ...]
    due_at: int
    max_data: int
    template: list[bytes] = field(default_factory=list)  # [prefix, suffix], or empty: none


class LateReads:
    """How late the reads came, when by more than ``LATE_READ_S``: on the timer, how much later than it
    was due; woken by readability, how long the longest-waiting read's bytes had waited.

    Why: two chunks of one stream read together share one stamp, and the reader cannot tell a server
    that wrote them together from a client that read them late; the saturation rule asks how late the
    loop was during the request (``saturation.py``). The lag monitor's timer is due every 20 ms, so a
    stall of 10-20 ms, long enough to make an 8 ms pace's read late by a whole gap of 20 ms, delays it
    by more than 3 ms about half the time (measured at 300 streams: 46 requests with a gap 20 ms wrong
    in one run, unflagged, the largest lag sampled during them 2.8 ms). The paced reads' own timer is
    due every pace (2-8 ms); between paced stretches the reads wake when bytes come, and the bytes that
    waited through a stall say how long it was.

    Only the running maxima are kept (``RunningMaxima``), so the most since any moment is answered
    however long ago that was."""

    def __init__(self) -> None:
        self._late = RunningMaxima()  # by when each late read came

    def note(self, now: float, late_by: float) -> None:
        """A read at ``now`` came ``late_by`` seconds late."""
        if late_by > LATE_READ_S:
            self._late.add(now, late_by)

    def since(self, start: float) -> float:
        """The most a read came late from ``start`` on (0.0: none late)."""
        return self._late.since(start)


class SocketReads:
    """The epoll set of one event loop's stamped sockets, and the paced reading of them.

    Over 150 lines, kept whole: the pacing is one state machine over the set (woken by readability
    or on the timer, the ``Pace``, when the last read and the last complete poll were), and every
    step of it reads and writes that state on each wake-up; ``NativeSocketReads`` overrides the
    reading hooks of this same class, so the C reads and the Python ones share the pacing. The pure
    parts are functions and small values beside it already (``next_pace``, ``Pace``, ``kernel_time``,
    ``monotonic_stamp``, ``early_stamp``, ``LateReads``, ``KeepMode``); splitting the Python reading
    (``read``, ``_read_ready``) from the pacing would need a twin of the C type's interface, and the
    tests drive both through this class."""

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        self._loop = loop
        self._clock = clock
        self._epoll = self._epoll_set()
        self.sockets: dict[int, StampedSocket] = {}
        self._watched = False
        self._tick_handle: asyncio.TimerHandle | None = None  # reading on a timer (busy)
        # Reads land here and only their bytes are copied out: a fresh 256 KiB buffer per recvmsg is
        # an mmap, an mremap and an munmap per read (measured: a third of the client's CPU).
        self.buffer = self._read_buffer()
        self._buffers = (self.buffer,)
        self._offset: float | None = None  # wall clock minus monotonic clock, from the last clean read
        self.pace = Pace()
        self._tick_due = 0.0  # when the paced read on the timer should come
        self._read_at = 0.0  # when the last read of the sockets (paced or woken) started
        self._polled = 0.0  # the monotonic now of the last poll of the set (0: none yet)
        self._listeners = _LISTENERS.setdefault(loop, [])
        self._waited_s = 0.0  # see _waited
        self.late = LateReads()

    @property
    def paced(self) -> bool:
        """Whether the reads are on the timer (busy), not woken by readability."""
        return self._tick_handle is not None

    def _epoll_set(self) -> Any:
        return select.epoll()

    def _read_buffer(self) -> memoryview:
        return memoryview(bytearray(READ_BYTES))

    def clocks(self) -> tuple[float, float]:
        """The monotonic now and the wall clock's offset from it (see the module docstring). The first
        offset is tried for up to ``OFFSET_TRIES`` times, so that a preemption then does not shift
        every stamp until the next clean read: the first clean one, else the tightest, is taken."""
        first, tightest = self._offset is None, math.inf
        for _ in range(OFFSET_TRIES if first else 1):
            before = self._clock()
            wall = time.time()
            now = self._clock()
            if now - before <= OFFSET_BRACKET_S or (first and now - before < tightest):
                self._offset, tightest = wall - (before + now) / 2, now - before
            if tightest <= OFFSET_BRACKET_S:
                break
        assert self._offset is not None
        return now, self._offset

    def add(self, stamped: StampedSocket) -> None:
        stamped.added_at = self._clock()
        self._register(stamped)
        self.sockets[stamped.fileno] = stamped
        if not self._watched and self._tick_handle is None:
            self._watch()

    def _register(self, stamped: StampedSocket) -> None:
        self._epoll.register(stamped.fileno, select.EPOLLIN)

    def remove(self, fd: int) -> None:
        stamped = self.sockets.get(fd)
        if stamped is not None:
            stamped.early = self.early_of(stamped)  # what its reads counted outlives them
            del self.sockets[fd]
            self._unregister(fd)
        if not self.sockets:
            self._unwatch()
            if self._tick_handle is not None:
                self._tick_handle.cancel()
                self._tick_handle = None
                self._tell_paced(False)

    def _unregister(self, fd: int) -> None:
        with contextlib.suppress(OSError, ValueError):
            self._epoll.unregister(fd)

    def _watch(self) -> None:
        if self.sockets:
            self._loop.add_reader(self._epoll.fileno(), self._on_ready)
            self._watched = True

    def _unwatch(self) -> None:
        if self._watched:
            self._loop.remove_reader(self._epoll.fileno())
            self._watched = False

    def _on_ready(self) -> None:
        """The loop saw a socket readable: read; when several were, switch to reading on a timer
        (unless the streams are too fast for any pace: then their gaps say when they no longer are)."""
        self._read_at = self._clock()
        busy = self._read_ready() > 1
        self.late.note(self._clock(), self._waited())
        if self.pace.seconds == UNPACED:
            self.pace = next_pace(self.pace, self._clock(), *self.take_gaps())
        if busy and self.sockets and self.pace.seconds != UNPACED:
            self._unwatch()
            self._tick_soon()
            self._tell_paced(True)

    def _tick(self) -> None:
        """Paced reading: read what is ready; while that is more than one socket, stay on the timer
        (no watcher to remove and add back per wake-up), else go back to waking on readability."""
        self._tick_handle = None
        now = self._clock()
        late_by = now - self._tick_due
        if late_by > LATE_READ_S:  # (note's own test, here: a call per read saved, nearly every read)
            self.late.note(now, late_by)
        previous, self._read_at = self._read_at, now
        try:
            busy = self._read_ready() > 1
        except BaseException:
            self._watch()  # a bug in one protocol (raised to the loop's handler) must not stop the reads
            self._tell_paced(False)
            raise
        end = self._clock()
        if busy and self.sockets:
            self.pace = next_pace(self.pace, end, *self.take_gaps(), end - previous)
        paced = busy and self.sockets and self.pace.seconds != UNPACED
        if paced:
            self._tick_soon()
        else:
            self._watch()
        # Last, with the reads rescheduled: what waited behind this read waited as long as it took.
        for listener in tuple(self._listeners):
            listener.paced_read(max(late_by, end - now))
        if not paced:
            self._tell_paced(False)

    def _tell_paced(self, on: bool) -> None:
        for listener in tuple(self._listeners):
            listener.paced(on)

    def _tick_soon(self) -> None:
        self._tick_due = self._clock() + self.pace.seconds
        self._tick_handle = self._loop.call_later(self.pace.seconds, self._tick)

    def _read_ready(self) -> int:
        """Read every ready socket once; returns how many were ready."""
        now, offset = self.clocks()
        self._waited_s = 0.0
        ready = self._epoll.poll(0, MAX_READY)
        sockets, read, polled = self.sockets, self.read, self._polled
        for fd, _ in ready:
            stamped = sockets.get(fd)
            if stamped is not None:
                read(stamped, now, offset, polled)
        # Only a poll that read every ready socket says the others had nothing (not one a protocol's
        # error stopped, nor one that took MAX_READY: ready sockets were left, their bytes older).
        if len(ready) < MAX_READY:
            self._polled = now
        return len(ready)

    def _waited(self) -> float:
        """The longest a read of the last ``_read_ready`` had waited (its wake-up less its stamp)."""
        return self._waited_s

    def keep(self, stamped: StampedSocket, mode: KeepMode) -> bool:
        """Put ``stamped`` in keep mode; False: these reads have none (only ``NativeSocketReads``)."""
        return False

    def take_gaps(self) -> tuple[int, float]:
        """The gaps of kept streams since the last call: how many, and the shortest (none here)."""
        return 0, float("inf")

    def early_of(self, stamped: StampedSocket) -> int:
        """How many of ``stamped``'s reads so far had a kernel stamp impossibly early (``early_stamp``):
        each was stamped when it was read instead."""
        return stamped.early

    def unkeep(self, stamped: StampedSocket) -> None:
        """End ``stamped``'s keep mode, if it is in it."""

    def read_now(self, stamped: StampedSocket) -> None:
        """Read ``stamped`` once, out of turn: what arrived since the last paced read (a FIN included)
        reaches its protocol now, not up to ``PACE_S`` later."""
        self.read(stamped, *self.clocks(), self._polled)

    def read(self, stamped: StampedSocket, now: float, offset: float, polled: float = 0.0) -> None:
        """One ``recvmsg`` of ``stamped`` and its bytes to the protocol, stamped by the kernel (by the
        clock when it gave no stamp, or one impossibly early: before ``polled``, the last complete poll
        of the set, when that poll saw it and its last read took all there was); its end (a FIN or an
        error) to ``lose``. Nothing waiting: nothing."""
        try:
            size, ancillary, _flags, _address = stamped.sock.recvmsg_into(self._buffers, _ANCILLARY_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            stamped.lose(exc)
            return
        if not size:
            stamped.lose(None)  # the server closed its side
            return
        stamp = kernel_time(ancillary, offset) if ancillary else None
        readable_after = polled if stamped.drained and stamped.added_at < polled else 0.0
        if early_stamp(stamp, readable_after):
            stamped.early += 1
            stamp = None  # not a stamp to use: the read's own time stands for it
        if stamp is None or stamp > now:
            now = self._clock()  # the bytes may have come while this wake-up was reading
        stamped.drained = size < len(self.buffer)
        stamped.last_stamp = monotonic_stamp(stamp, now, stamped.last_stamp)
        self._waited_s = max(self._waited_s, now - stamped.last_stamp)
        stamped.protocol.received(stamped.last_stamp, bytes(self.buffer[:size]))


class NativeSocketReads(SocketReads):
    """``SocketReads`` with the reading itself in C (``_reads.c``): the same epoll set, pacing, stamps
    and hand-over to the protocol, at a fraction of the CPU per read, plus keep mode: a read that is
    one whole HTTP chunk of a stream being kept goes straight to the reader's list, with no Python
    frame run for it (``http.py`` turns the mode on only between two chunks of a chunked body)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, clock: Clock) -> None:
        super().__init__(loop, clock)
        self._reads = self._epoll

    def _epoll_set(self) -> Any:
        assert _native is not None and SO_TIMESTAMPNS is not None
        return _native.Reads(SO_TIMESTAMPNS, READ_BYTES, GAP_FLOOR_S, EARLY_STAMP_S)

    def _read_buffer(self) -> memoryview:
        return memoryview(b"")  # the C reads have their own

    def _register(self, stamped: StampedSocket) -> None:
        self._reads.add(stamped.fileno, stamped.protocol.received, stamped.lose)

    def _unregister(self, fd: int) -> None:
        self._reads.remove(fd)

    def keep(self, stamped: StampedSocket, mode: KeepMode) -> bool:
        self._reads.keep(
            stamped.fileno,
            mode.kept,
            mode.state,
            mode.due,
            mode.markers,
            mode.due_at,
            mode.max_data,
            mode.template,
        )
        return True

    def unkeep(self, stamped: StampedSocket) -> None:
        self._reads.unkeep(stamped.fileno)

    def take_gaps(self) -> tuple[int, float]:
        count, shortest = self._reads.take_gaps()
        return int(count), float(shortest)

    def _read_ready(self) -> int:
        return int(self._reads.read_ready(*self.clocks()))

    def _waited(self) -> float:
        return float(self._reads.waited())

    def read_now(self, stamped: StampedSocket) -> None:
        self._reads.read(stamped.fileno, *self.clocks())

    def early_of(self, stamped: StampedSocket) -> int:
        if self.sockets.get(stamped.fileno) is not stamped:  # removed (its count was taken then)
            return stamped.early
        return int(self._reads.early_of(stamped.fileno))


_READS: WeakKeyDictionary[asyncio.AbstractEventLoop, SocketReads] = WeakKeyDictionary()
_LISTENERS: WeakKeyDictionary[asyncio.AbstractEventLoop, list[PacedReadsListener]] = WeakKeyDictionary()
NATIVE_READS = _native is not None  # tests turn it off to run the Python reads


def reads_lateness(start: float) -> float:
    """The most the running loop's stamped reads came late from ``start`` on (``LateReads``)."""
    reads = _READS.get(asyncio.get_running_loop())
    return 0.0 if reads is None else reads.late.since(start)


def listen_to_paced_reads(listener: PacedReadsListener) -> bool:
    """Tell ``listener`` when the running loop's reads go on their timer and off it, and how late each
    paced read came, until ``stop_listening``; returns whether they are on it now."""
    loop = asyncio.get_running_loop()
    listeners = _LISTENERS.setdefault(loop, [])
    if listener not in listeners:
        listeners.append(listener)
    reads = _READS.get(loop)
    return reads is not None and reads.paced


def stop_listening(listener: PacedReadsListener, loop: asyncio.AbstractEventLoop) -> None:
    """The end of ``listen_to_paced_reads`` on ``loop``."""
    listeners = _LISTENERS.get(loop, [])
    if listener in listeners:
        listeners.remove(listener)


def loop_reads(clock: Clock) -> SocketReads:
    """The running loop's ``SocketReads`` (made on first use): in C where it was built."""
    loop = asyncio.get_running_loop()
    reads = _READS.get(loop)
    if reads is None:
        kind = NativeSocketReads if NATIVE_READS else SocketReads
        reads = _READS[loop] = kind(loop, clock)
    return reads


class _PacedReads:
    """``listen_to_paced_reads`` and ``stop_listening`` as the ``saturation.PacedReads`` a lag monitor
    takes its samples from."""

    def listen(self, monitor: PacedReadsListener) -> bool:
        return listen_to_paced_reads(monitor)

    def stop(self, monitor: PacedReadsListener, loop: asyncio.AbstractEventLoop) -> None:
        stop_listening(monitor, loop)


PACED_READS: Final = _PacedReads()
