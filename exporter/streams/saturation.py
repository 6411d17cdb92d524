"""The probe's honesty about itself: is the client too busy for its own timestamps to be right?

A stamp is taken when the event loop gets round to a socket that became readable. When the loop is
busy (too many streams for one core, a long GC pause, a noisy neighbour), every stamp taken after the
busy stretch is late, and chunks that arrived apart are read together, their gaps collapsing to ~0.
The evidence recorded on every ``ProbeResult``:

* ``loop_lag_s`` and ``loop_lag_share``: the largest lateness of a periodic timer (``LagMonitor``, every
  20 ms; while the kernel-stamped reads are paced, the largest lateness or reading time of their own
  timer's reads in each 20 ms) while the request was in flight, and the share of those samples later
  than ``LAG_LIMIT_S``.
  asyncio timers wake up to 1 ms late by themselves (epoll's millisecond timeout), so lag below ~1 ms is
  the clock's grain, not saturation. With kernel stamps ``loop_lag_s`` also takes how late the stamped
  reads came (``socket_reads.LateReads``): the paced reads' own timer, due every 2-8 ms, and, woken by
  readability, how long their bytes had waited; a timer due every 20 ms sees a stall of 10-20 ms late by
  more than 3 ms only about half the time;
* ``multi_event_reads``: socket reads that carried more than one token event of this request, and
  came more than ``LAG_LIMIT_S`` after the stamp of the request's previous token read (``stream.py``).
  A read takes every byte already there, so the events of the next one all arrived after that stamp:
  its own stamp, the time the last of them arrived, is wrong for the others by at most the difference.
  Within 3 ms a read of several is as good as separate reads on a loop on time and is not counted (the
  simulator writes a stream's first tokens 0.5-2 ms apart, and a 2-core CI machine's loop is often more
  than 3 ms late: one such read then flagged a request whose gaps were right within 2 ms). Past it, on
  a stream whose chunks the server wrote apart, the client read them late and their gaps collapsed to
  zero;
* ``cpu_share``: the process's CPU time over wall time while the request was in flight (1.0: the core
  was never idle), from the CPU clock the lag monitor reads at each tick (reading it per request cost
  two system calls of ~1-5 us each, per request, on this VM).

**The rule** (``is_unreliable`` of a request's ``ReadEvidence``): a request is unreliable when

* more than ``LAG_SHARE`` (5%) of the lag samples during it were later than ``LAG_LIMIT_S`` (3 ms: the
  1 ms timer grain plus 2 ms of real delay), i.e. the client was behind for a sustained part of it; or
* the loop stalled once for more than ``STALL_LIMIT_S`` (20 ms, a whole inter-token gap of a fast
  stream: one stamp that late is simply wrong); or
* more than ``MULTI_READ_SHARE`` (5%) of its token reads carried several events, and more than one (a
  few can be the server's own batching; more means the client fell behind where its monitors did not
  see it, or the server sends its chunks in bursts: a gateway that buffers the stream. The client
  cannot tell those apart, so both are flagged, and the messages say so); or
* any of its token reads carried several events while the loop was late by more than ``LAG_LIMIT_S``
  during it: then the client may have read them together itself, and the two stamps it gave them (one,
  the later chunk's) make a gap twice too long and one of zero, a stall the stream never had. Measured
  at 300 streams of 20 ms gaps: a 68 ms gen2 garbage collection left one such read in each of 286
  requests, each one read in 63, so under the 5% and not flagged, with a gap wrong by 20 ms; every
  request with such a read had loop lag above 3 ms. Shorter stalls did the same where only the paced
  reads' timer saw them (46 requests in one run, the lag monitor's largest sample 2.8 ms). A server's
  batching read once on a client that was on time stays unflagged.

*Kernel stamps* (``stamped.py``: plain TCP on Linux, the default) are taken when each packet arrives, so
a late loop no longer makes a stamp late: for such a request only the last two criteria count. Chunks
that waited in the socket together are still read together and share one stamp, and that is what a
busy client still gets wrong. And one more, kernel stamps' own: a request is unreliable when one of
its reads had a stamp earlier than its bytes could be read (``early_stamps``,
``socket_reads.early_stamp``): over a real network a lost packet's retransmission takes the stamp of
the packets that waited for it, and a stall of a retransmission timeout vanishes from the stamps.
The read is stamped when it was read instead, as a read without a stamp is: never early, but late by
up to a span of the reads (2-10 ms) when they are paced, so the two gaps around it are doubtful. (A
step of the wall clock forward does the same to the stamps mapped across it, and is flagged alike.)

A single short hiccup (a few ms, once) does not mark a request: it moves one stamp by less than the
5 ms one asks of single gaps, and flagging every request in flight for it would make the flag noise.
What an unflagged request promises: no read merged events that may have come more than 3 ms apart
while the loop was late, and not many (5% of its reads, one on a short stream) even on time.
CPU share is recorded but not part of the rule: a busy core that still wakes on time measures correctly.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from exporter.streams.maxima import RunningMaxima
from exporter.streams.result import ProbeResult

LAG_LIMIT_S = 0.003
LAG_SHARE = 0.05
STALL_LIMIT_S = 0.020
MULTI_READ_SHARE = 0.05
# One read of several events on a loop that was on time is tolerated however short the stream: under
# 20 reads 5% is less than one, and the simulator writes a stream's first two tokens 0.5-2 ms apart
# (measured: 16-token streams at 10 in flight, such a read in 5-6 of 20 requests of a capacity
# trial, loop lag under 1.5 ms: every one flagged, an error of 2 ms at most). A read of two on a
# late loop is flagged by the rule above whatever the count.
MULTI_READS_FREE = 1
SAMPLE_INTERVAL_S = 0.02
# Enough samples for a 40-minute request at 50 samples/s; older ones are dropped in halves.
MAX_SAMPLES = 120_000
MAX_STALLS = 4096  # stall windows kept (the older half dropped): a request's stalls, unless saturated


@dataclass(frozen=True, slots=True)
class ReadEvidence:
    """What a request's loop and reads say of its stamps: the whole of the rule's input (the
    module docstring names each part)."""

    loop_lag_s: float
    loop_lag_share: float
    multi_event_reads: int
    token_reads: int
    kernel_stamps: bool = False
    early_stamps: int = 0
    merged_events: int = 0  # the token events the multi-event reads carried

    @classmethod
    def of(cls, result: ProbeResult, token_reads: int) -> ReadEvidence:
        """The evidence a finished request recorded (its token reads are its decoder's count)."""
        return cls(
            result.loop_lag_s,
            result.loop_lag_share,
            result.multi_event_reads,
            token_reads,
            result.kernel_stamps,
            result.early_stamps,
            result.merged_events,
        )


def is_unreliable(evidence: ReadEvidence) -> bool:
    """The saturation rule described in the module docstring."""
    return why_unreliable(evidence) is not None


def why_unreliable(evidence: ReadEvidence) -> str | None:
    """Which part of the rule flags a request, in words (None: not flagged)."""
    if late_loop := _late_loop(evidence):
        return late_loop
    if evidence.early_stamps:  # a retransmission (socket_reads.early_stamp): a span wrong at most
        return (
            f"{evidence.early_stamps} kernel stamps earlier than their bytes could be read "
            "(a lost packet's retransmission, or a step of the wall clock)"
        )
    multi, reads = evidence.multi_event_reads, evidence.token_reads
    if multi and evidence.loop_lag_s > LAG_LIMIT_S:  # read together, perhaps by a late client
        return f"merged reads while the loop was over {LAG_LIMIT_S * 1e3:.0f} ms late"
    allowed = max(MULTI_READ_SHARE * reads, MULTI_READS_FREE)
    if multi > allowed:  # the client late unseen, or the server sending bursts: alike to it
        return f"more merged reads than {MULTI_READ_SHARE:.0%} of {reads} reads and one"
    return None


def _late_loop(evidence: ReadEvidence) -> str | None:
    """The parts of the rule that distrust every stamp of a request: its reads were stamped when the
    loop got round to them, and the loop was late for long (None: neither)."""
    if evidence.kernel_stamps:
        return None
    if evidence.loop_lag_s > STALL_LIMIT_S:
        return f"the loop stalled over {STALL_LIMIT_S * 1e3:.0f} ms with read-time stamps"
    if evidence.loop_lag_share > LAG_SHARE:
        return f"over {LAG_SHARE:.0%} of lag samples late with read-time stamps"
    return None


def doubtful_gaps(evidence: ReadEvidence, events: int, near_stalls: int | None = None) -> int:
    """How many of a request's ``events`` gaps between token events (the first: from the send) the
    rule's flag on ``evidence`` concerns: every one when its stamps were all the loop's and the loop
    was late for long; when the loop's stamps were flagged for a stall alone, the gaps ``near_stalls``
    counted (``gaps_near_stalls``: a stall moved only the stamps of the reads it delayed; every gap
    when the stalls were not recorded); else those around its merged reads. A read of k events
    gives them one stamp, so the gap into the first is too long and the k - 1 after it read 0; with
    the loop's own stamps that stamp may be late too, and so the gap after the read short; and the two
    gaps around each read whose impossibly early kernel stamp was not used (the read's own time stands
    for it, late by up to a span of the reads). None unflagged."""
    if not is_unreliable(evidence):
        return 0
    reads = 0 if evidence.kernel_stamps else evidence.multi_event_reads
    around_merged = evidence.merged_events + reads + 2 * evidence.early_stamps
    if _late_loop(evidence):
        if near_stalls is None or evidence.loop_lag_share > LAG_SHARE:
            return events
        return min(near_stalls + around_merged, events)
    return min(around_merged, events)


def gaps_near_stalls(stamps: Sequence[float], stalls: Sequence[tuple[float, float]]) -> int:
    """How many gaps into and after a request's token events (``stamps``, in order) its loop's stalls
    (``stalls``: when each sample was due and when it came, ``LagMonitor.stalls_since``) may have made
    wrong, with stamps taken when the loop read: the gap into every event stamped from a stall's due
    time to ``STALL_LIMIT_S`` after it ended (its bytes may have waited through the stall, and a loop
    catching up reads for a while), and the gap after the last of them (it starts at a late stamp).
    Stamps before the due time were taken while the loop kept time; so were those after, once it
    caught up. Each gap is counted once, however many stalls it falls in."""
    doubtful: set[int] = set()
    for due, came in stalls:
        first = bisect.bisect_left(stamps, due)
        end = bisect.bisect_right(stamps, came + STALL_LIMIT_S)
        doubtful.update(range(first, min(end + 1, len(stamps))) if end > first else ())
    return len(doubtful)


class Stalls:
    """The windows of the lag samples later than ``STALL_LIMIT_S``, by sample position: (position,
    when the sample was due, when it came). With read-time stamps the reads a stall delayed are the
    gaps it makes doubtful (``gaps_near_stalls``). At most ``MAX_STALLS`` are kept (past it the older
    half goes), and a question from before the first kept is told its stalls are not known."""

    __slots__ = ("_from", "_windows")

    def __init__(self) -> None:
        self._windows: list[tuple[int, float, float]] = []
        self._from = 0  # the first sample position whose stall, if any, is still kept

    def add(self, position: int, due: float, came: float) -> None:
        """The sample at ``position``, due at ``due``, came at ``came``: later than the limit."""
        self._windows.append((position, due, came))
        if len(self._windows) > MAX_STALLS:
            half = len(self._windows) // 2
            self._from = self._windows[half - 1][0] + 1
            del self._windows[:half]

    def drop_before(self, position: int) -> None:
        """Forget the stalls of the samples before ``position`` (the monitor dropped those)."""
        self._windows = [stall for stall in self._windows if stall[0] >= position]
        self._from = max(self._from, position)

    def since(self, mark: int) -> list[tuple[float, float]] | None:
        """(due, came) of every stall at position ``mark`` or later, oldest first; None when some of
        them are no longer kept."""
        if mark < self._from:
            return None
        first = len(self._windows)
        while first and self._windows[first - 1][0] >= mark:
            first -= 1
        return [(due, came) for _, due, came in self._windows[first:]]


class PacedReads(Protocol):
    """A source of lateness samples that wakes the loop anyway (the probe's paced socket reads,
    ``probe.socket_reads.PACED_READS``): while it runs, the monitor takes its samples from it
    (``paced_read``) instead of from a timer of its own."""

    def listen(self, monitor: LagMonitor) -> bool:
        """Tell ``monitor`` of the running loop's paced reads until ``stop``; whether they run now."""

    def stop(self, monitor: LagMonitor, loop: asyncio.AbstractEventLoop) -> None:
        """The end of ``listen`` on ``loop``."""


class LagMonitor:
    """A self-rearming timer callback that records how late each of its wake-ups was.

    A plain ``call_later`` callback, not a task sleeping in a loop: no future, no task step. Still, on an
    otherwise idle loop every sample is one more wake-up of the process (measured ~100-175 us of CPU
    each on this project's VM), so the client runs the monitor only while requests are in flight, every
    20 ms; and, given their ``pace``, while the loop's kernel-stamped reads are paced
    (``probe.socket_reads``), it has no timer of its own but takes its samples from theirs, due every 2-8 ms, which wakes the process anyway
    (measured at 100 streams of 20 ms gaps, with the pace's rule of the same change: 1,880 -> 1,410
    wake-ups in a run of 38,400 chunks).

    What a request asks at its end (``since``, ``cpu_share_since``) is kept as it goes, so the answer
    costs the same however many samples the request saw (at 100 streams a request's start begins a
    sample at most paced reads, ~100 in a second-long request, and scanning them was ~2% of the client's
    CPU): a count of the late samples up to each one, and the running maxima (``maxima.py``). The
    process's CPU clock, a system call, is read by the first sample after a mark and then at most once
    an interval (a sample sooner takes the last reading, with that reading's time), and once more when
    a request asks for its share: the share runs from its first sample to the question, exactly."""

    def __init__(
        self,
        interval_s: float = SAMPLE_INTERVAL_S,
        clock: Callable[[], float] = time.perf_counter,
        pace: PacedReads | None = None,
    ) -> None:
        self.interval_s = interval_s
        self._clock = clock
        self._pace = pace  # None: the monitor's own timer takes every sample
        self._lags: list[float] = []
        self._late: list[int] = []  # how many samples were late up to each one, this one included
        self._late_dropped = 0  # and up to the last sample discarded
        self._peaks = RunningMaxima()  # the lags by sample position
        self._stalls = Stalls()  # the samples later than STALL_LIMIT_S, by sample position
        self._ticks: list[tuple[float, float]] = []  # (wall clock, process CPU time) read at or before each
        self._cpu: tuple[float, float] = (-math.inf, 0.0)  # the last reading (wall clock, CPU time)
        self._dropped = 0  # samples discarded from the front, so marks stay valid
        self._handle: asyncio.TimerHandle | None = None
        self._expected = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None  # while started
        self._bin_ends = 0.0  # the last sample takes the paced reads' samples until then

    def start(self) -> None:
        """Start sampling on the running loop."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            if self._pace is None or not self._pace.listen(self):
                self._arm(self._loop)

    def stop(self) -> None:
        """Stop sampling (``start`` resumes; marks stay valid)."""
        if self._loop is not None:
            if self._pace is not None:
                self._pace.stop(self, self._loop)
            self._loop = None
        self._disarm()

    def _disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def paced(self, on: bool) -> None:
        """The loop's reads went on their timer (their reads are the samples now) or off it."""
        if on:
            self._disarm()
        elif self._loop is not None and self._handle is None:
            self._arm(self._loop)

    def paced_read(self, late_by: float) -> None:
        """A sample from the paced reads' timer: how late it came, or how long it read. One sample per
        ``interval_s`` (the largest), as its own timer takes: the share of late samples means the same,
        and ``MAX_SAMPLES`` still holds 40 minutes."""
        now, lag = self._clock(), max(late_by, 0.0)
        if now < self._bin_ends:
            if lag > self._lags[-1]:
                if lag > LAG_LIMIT_S >= self._lags[-1]:
                    self._late[-1] += 1
                self._lags[-1] = lag
                self._peaks.add(self._dropped + len(self._lags) - 1, lag)
            if lag > STALL_LIMIT_S:  # rare: no call on the paced reads' every tick
                self._stalls.add(self._dropped + len(self._lags) - 1, now - lag, now)
            return
        self._record(lag, now)
        self._bin_ends = now + self.interval_s

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        self._expected = self._clock() + self.interval_s
        self._handle = loop.call_later(self.interval_s, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        now = self._clock()
        self._record(max(now - self._expected, 0.0), now)
        self._arm(loop)

    def _record(self, lag: float, now: float) -> None:
        if now - self._cpu[0] >= self.interval_s or now < self._cpu[0]:
            self._cpu = (now, time.process_time())
        self._late.append((self._late[-1] if self._late else 0) + (lag > LAG_LIMIT_S))
        self._lags.append(lag)
        self._ticks.append(self._cpu)
        self._peaks.add(self._dropped + len(self._lags) - 1, lag)
        if lag > STALL_LIMIT_S:
            self._stalls.add(self._dropped + len(self._lags) - 1, now - lag, now)
        if len(self._lags) > MAX_SAMPLES:
            self._drop_older_half()

    def _drop_older_half(self) -> None:
        """Forget the older half of the samples (``MAX_SAMPLES``); marks stay valid."""
        half = len(self._lags) // 2
        self._late_dropped = self._late[half - 1]
        del self._lags[:half]
        del self._late[:half]
        del self._ticks[:half]
        self._dropped += half
        self._peaks.drop_before(self._dropped)
        self._stalls.drop_before(self._dropped)

    def mark(self) -> int:
        """A position in the sample stream: pass it to ``since`` when the request ends."""
        self._bin_ends = 0.0  # the paced reads' next sample is a new one: this request's
        self._cpu = (-math.inf, 0.0)  # and it reads the CPU clock: where the request's share starts
        return self._dropped + len(self._lags)

    def since(self, mark: int) -> tuple[float, float]:
        """The largest lag sampled since ``mark`` and the share of samples later than ``LAG_LIMIT_S``
        (0.0, 0.0 when none)."""
        first = max(mark - self._dropped, 0)
        count = len(self._lags) - first
        if count <= 0:
            return 0.0, 0.0
        late = self._late[-1] - (self._late[first - 1] if first else self._late_dropped)
        return self._peaks.since(self._dropped + first), late / count

    def stalls_since(self, mark: int) -> list[tuple[float, float]] | None:
        """(when it was due, when it came) of every sample since ``mark`` later than ``STALL_LIMIT_S``,
        oldest first; None when some of them are no longer kept."""
        return self._stalls.since(mark)

    def cpu_share_since(self, mark: int) -> float | None:
        """The process's CPU time over wall time from the first sample since ``mark`` to now (None
        with fewer than two samples: too short a span to say)."""
        first = max(mark - self._dropped, 0)
        if len(self._ticks) - first < 2:
            return None
        (wall0, cpu0), wall1, cpu1 = self._ticks[first], self._clock(), time.process_time()
        return min((cpu1 - cpu0) / (wall1 - wall0), 1.0) if wall1 > wall0 else None
