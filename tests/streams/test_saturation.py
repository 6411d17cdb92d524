"""The saturation rule, the lag monitor, and a request marked unreliable when its loop was blocked."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time

import pytest

from exporter.probe.client import ProbeClient
from exporter.sim import SimServer
from exporter.streams import saturation
from exporter.streams.request import RequestSpec
from exporter.streams.result import Outcome
from exporter.streams.saturation import (
    LAG_LIMIT_S,
    STALL_LIMIT_S,
    LagMonitor,
    ReadEvidence,
    doubtful_gaps,
    gaps_near_stalls,
    is_unreliable,
    why_unreliable,
)
from tests.probe.helpers import script, settings_for


@pytest.mark.parametrize(
    ("lag", "share", "multi", "reads", "unreliable"),
    [
        (0.0, 0.0, 0, 100, False),
        (0.010, 0.05, 0, 100, False),  # a short hiccup, rarely: not marked
        (STALL_LIMIT_S * 1.01, 0.01, 0, 100, True),  # one long stall
        (0.004, 0.06, 0, 100, True),  # behind for a sustained part of the request
        (0.0, 0.0, 5, 100, False),  # 5% of reads: tolerated (the server's own batching)
        (0.0, 0.0, 6, 100, True),
        (LAG_LIMIT_S, 0.01, 1, 100, False),  # one read of two on a loop on time: the server's
        (LAG_LIMIT_S * 1.01, 0.01, 1, 100, True),  # ... on a late loop: perhaps ours
        (0.0, 0.0, 0, 0, False),
        (0.0, 0.0, 1, 15, False),  # a short stream's one read of two: the server's (1 of 15 is 6.7%)
        (0.0, 0.0, 2, 15, True),
    ],
)
def test_rule(lag: float, share: float, multi: int, reads: int, unreliable: bool) -> None:
    assert is_unreliable(ReadEvidence(lag, share, multi, reads)) is unreliable


@pytest.mark.parametrize(
    ("lag", "share", "multi", "unreliable"),
    [
        (STALL_LIMIT_S * 5, 0.5, 0, False),  # a late loop does not move a kernel stamp
        (0.0, 0.0, 6, True),  # chunks read together still share one stamp
        (0.002, 0.0, 1, False),  # one such read, the loop on time: the server's batching
        (0.060, 0.01, 1, True),  # one such read during a 60 ms stall (a gen2 collection): perhaps ours
    ],
)
def test_rule_for_kernel_stamps(lag: float, share: float, multi: int, unreliable: bool) -> None:
    assert is_unreliable(ReadEvidence(lag, share, multi, 100, kernel_stamps=True)) is unreliable


@pytest.mark.parametrize(
    ("evidence", "why"),
    [
        ((0.0, 0.0, 0, 100, True), None),
        ((STALL_LIMIT_S * 2, 0.0, 0, 100, False), "the loop stalled over 20 ms with read-time stamps"),
        ((0.004, 0.06, 0, 100, False), "over 5% of lag samples late with read-time stamps"),
        ((0.004, 0.0, 1, 100, True), "merged reads while the loop was over 3 ms late"),
        ((0.0, 0.0, 2, 15, True), "more merged reads than 5% of 15 reads and one"),
    ],
)
def test_the_rule_says_which_part_flagged_a_request(
    evidence: tuple[float, float, int, int, bool], why: str | None
) -> None:
    assert why_unreliable(ReadEvidence(*evidence)) == why
    assert is_unreliable(ReadEvidence(*evidence)) is (why is not None)


@pytest.mark.parametrize(
    ("lag", "share", "merged", "kernel_stamps", "doubtful"),
    [
        (0.002, 0.0, 2, False, 0),  # one read of two on a loop on time: not flagged, nothing to doubt
        (STALL_LIMIT_S * 2, 0.0, 0, False, 300),  # read-time stamps, a long stall: every gap
        (0.004, 0.06, 2, False, 300),  # read-time stamps, behind for long: every gap
        (STALL_LIMIT_S * 2, 0.5, 3, True, 3),  # kernel stamps: only the merged reads' gaps
        (0.004, 0.0, 2, False, 3),  # read-time stamps, a short lag: and the gap after the read
        (0.0, 0.0, 400, True, 300),  # never more than the request's gaps
    ],
)
def test_the_gaps_a_flag_concerns(
    lag: float, share: float, merged: int, kernel_stamps: bool, doubtful: int
) -> None:
    # ``merged`` token events in one merged read (several, in the last case; 100 reads in all)
    reads = 0 if not merged else 1 if merged < 100 else 10
    evidence = ReadEvidence(lag, share, reads, 100, kernel_stamps, merged_events=merged)
    assert doubtful_gaps(evidence, 300) == doubtful


def test_a_stall_alone_doubts_the_gaps_near_it_not_every_one() -> None:
    """With the loop's own stamps a stall moved the stamps of the reads it delayed; the rest were
    taken on time (a loop late for long still doubts every gap)."""
    stalled = ReadEvidence(STALL_LIMIT_S * 2, 0.0, 0, 100)
    merged = dataclasses.replace(stalled, multi_event_reads=1, merged_events=2)
    assert doubtful_gaps(merged, 300, near_stalls=4) == 4 + 2 + 1
    assert doubtful_gaps(stalled, 300, near_stalls=None) == 300  # not recorded
    late_for_long = dataclasses.replace(stalled, loop_lag_share=0.06)
    assert doubtful_gaps(late_for_long, 300, near_stalls=4) == 300
    assert doubtful_gaps(stalled, 3, near_stalls=4) == 3  # no more than it has


@pytest.mark.parametrize(
    ("stalls", "doubtful"),
    [
        ([], 0),
        # stamped 0.095-0.165 (the stall's end + STALL_LIMIT_S): 0.10-0.16, and the gap after them
        ([(0.095, 0.145)], 7 + 1),
        ([(0.095, 0.145), (0.150, 0.155)], 9),  # overlapping stalls: each gap once (0.10-0.17, 0.18)
        ([(0.0, 0.025)], 5 + 1),  # the first gap is from the send: 0.00-0.04, and 0.05
        ([(0.29, 0.35)], 0),  # after the last event: no stamp of this request was late for it
        ([(0.2825, 0.30)], 1),  # the last event read late: its gap, none after it
        ([(0.045, 0.055), (0.195, 0.205)], 4 + 4),
    ],
)
def test_gaps_near_stalls(stalls: list[tuple[float, float]], doubtful: int) -> None:
    stamps = [round(0.01 * i, 3) for i in range(29)] + [0.285]  # 10 ms apart to 0.28, one at 0.285
    assert gaps_near_stalls(stamps, stalls) == doubtful


def test_an_impossibly_early_kernel_stamp_flags_a_request_and_doubts_the_gaps_around_it() -> None:
    why = why_unreliable(ReadEvidence(0.0, 0.0, 0, 100, kernel_stamps=True, early_stamps=2))
    assert why is not None and "2 kernel stamps earlier" in why
    assert is_unreliable(ReadEvidence(0.0, 0.0, 0, 100, kernel_stamps=True, early_stamps=1))
    assert not is_unreliable(ReadEvidence(0.0, 0.0, 0, 100, kernel_stamps=True, early_stamps=0))
    early = ReadEvidence(0.0, 0.0, 1, 100, True, early_stamps=3, merged_events=2)
    assert doubtful_gaps(early, 300) == 2 + 6
    assert doubtful_gaps(dataclasses.replace(early, multi_event_reads=0, merged_events=0), 4) == 4


async def test_monitor_sees_a_blocked_loop() -> None:
    monitor = LagMonitor(interval_s=0.005)
    monitor.start()
    await asyncio.sleep(0.02)
    mark = monitor.mark()
    time.sleep(0.03)  # block the loop, as a saturated client does
    await asyncio.sleep(0.02)
    monitor.stop()
    worst, share = monitor.since(mark)
    assert worst >= 0.02 and share > 0
    assert monitor.since(monitor.mark()) == (0.0, 0.0)
    assert LAG_LIMIT_S < 0.02


async def test_monitor_keeps_when_each_stall_was() -> None:
    monitor = LagMonitor(interval_s=0.005)
    monitor.start()
    await asyncio.sleep(0.02)
    mark = monitor.mark()
    began = time.perf_counter()
    time.sleep(0.05)  # block the loop, as a saturated client does
    ended = time.perf_counter()
    await asyncio.sleep(0.02)
    monitor.stop()
    stalls = monitor.stalls_since(mark)
    assert stalls  # a busy machine may add stalls of its own; one of them is the block's:
    # due within an interval of the block's start (the timer's own grain), came when it ended
    assert any(
        began - 0.006 <= due <= began + 0.006 and ended <= came <= ended + 0.02 for due, came in stalls
    )
    assert monitor.stalls_since(monitor.mark()) == []


def test_stalls_no_longer_kept_are_said_to_be_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(saturation, "MAX_STALLS", 4)
    now = [0.0]
    monitor = LagMonitor(interval_s=0.02, clock=lambda: now[0])
    marks = []
    for _ in range(6):
        marks.append(monitor.mark())
        now[0] += 0.1
        monitor.paced_read(0.05)  # a stall
        now[0] += 0.1
        monitor.paced_read(0.0)
    assert monitor.stalls_since(marks[0]) is None  # its first stall was dropped: every gap is doubted
    assert monitor.stalls_since(marks[-1]) == [(pytest.approx(1.05), pytest.approx(1.1))]
    assert len(monitor.stalls_since(marks[-3]) or []) == 3


@pytest.mark.parametrize("max_samples", [1_000_000, 40])
def test_what_a_request_asks_at_its_end_is_what_its_samples_say(
    monkeypatch: pytest.MonkeyPatch, max_samples: int
) -> None:
    """``since`` keeps its answer as samples come (a late count up to each, the running maxima), and
    it must be the answer a scan of the request's samples gives: after samples, a paced interval's
    later and larger reads, marks, and the oldest half dropped at ``MAX_SAMPLES``."""
    monkeypatch.setattr(saturation, "MAX_SAMPLES", max_samples)
    rng = random.Random(7)
    now = [0.0]
    monitor = LagMonitor(interval_s=0.02, clock=lambda: now[0])
    marks: list[int] = []
    for _ in range(3000):
        now[0] += rng.choice([0.002, 0.008, 0.025])  # often within one interval: the sample grows
        monitor.paced_read(rng.choice([0.0, 0.001, 0.002, 0.004, 0.01, 0.05]) * rng.random())
        if rng.random() < 0.1:
            marks.append(monitor.mark())
        for mark in marks[-5:]:
            samples = monitor._lags[max(mark - monitor._dropped, 0) :]
            scanned = (
                (max(samples), sum(lag > LAG_LIMIT_S for lag in samples) / len(samples))
                if samples
                else (0.0, 0.0)
            )
            assert monitor.since(mark) == pytest.approx(scanned), mark
    assert monitor._dropped > 0 or max_samples > 3000


def test_a_requests_cpu_share_runs_from_its_first_sample_to_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU clock is read at most once an interval, but the first sample after a mark reads it
    afresh, and so does the question: idle time before the request is not its (a busy
    request of 35 ms after 15 ms idle read 0.46-0.67)."""
    wall, cpu = [0.0], [0.0]
    monkeypatch.setattr(saturation.time, "process_time", lambda: cpu[0])
    monitor = LagMonitor(interval_s=0.02, clock=lambda: wall[0])
    monitor.paced_read(0.0)  # a sample before the request, reading the CPU clock
    wall[0] = 0.015  # idle: no CPU time
    mark = monitor.mark()
    monitor.paced_read(0.0)  # the request's first sample, within an interval of that reading
    assert monitor.cpu_share_since(mark) is None  # one sample: too short a span
    wall[0], cpu[0] = 0.045, 0.03  # busy from the mark on: 30 ms of CPU in 30 ms
    monitor.paced_read(0.0)
    wall[0], cpu[0] = 0.05, 0.035
    assert monitor.cpu_share_since(mark) == pytest.approx(1.0)


async def test_while_the_reads_are_paced_the_monitor_samples_their_timer_not_its_own() -> None:
    """Its own timer would be one more wake-up of the process every 20 ms (socket_reads.py)."""
    monitor = LagMonitor(interval_s=0.005)
    monitor.start()
    assert monitor._handle is not None  # no paced reads on this loop: its own timer
    mark = monitor.mark()
    monitor.paced(True)
    assert monitor._handle is None
    monitor.paced_read(-0.001)  # early (the timer's grain): no lag
    monitor.paced_read(0.004)  # within the same interval: one sample, the largest
    assert monitor.since(mark) == (0.004, 1.0)
    await asyncio.sleep(0.006)
    monitor.paced_read(0.001)  # an interval later: a sample of its own
    assert monitor.since(mark) == (0.004, 0.5)
    await asyncio.sleep(0.02)
    assert monitor.mark() == mark + 2  # nothing of its own meanwhile
    monitor.paced_read(0.002)  # a mark starts a sample: the request's own
    assert monitor.since(mark + 2) == (0.002, 0.0)
    monitor.paced(False)
    await asyncio.sleep(0.02)
    assert monitor.mark() > mark + 3  # its timer again
    monitor.stop()
    monitor.paced(False)  # stopped: the reads going off their timer does not start it
    assert monitor._handle is None


async def test_request_during_which_the_loop_was_blocked_is_marked_unreliable(sim: SimServer) -> None:
    spec = RequestSpec(prompt="hi", max_tokens=20, extra_body=script(ttft=0.02, gaps=0.01))

    async def block_loop() -> None:
        await asyncio.sleep(0.08)
        time.sleep(0.05)  # five 10 ms chunks pile up in the socket meanwhile

    async with ProbeClient(settings_for(sim)) as client:
        result, _ = await asyncio.gather(client.send(spec), block_loop())
    assert result.outcome is Outcome.OK
    assert result.unreliable
    assert result.loop_lag_s >= 0.03
    assert result.multi_event_reads >= 1 and result.merged_events >= 2
    # Kernel stamps doubt only the merged reads' gaps; the loop's own stamps, those near the stall.
    if result.kernel_stamps:
        assert result.doubtful_gaps == result.merged_events
    assert result.cpu_share is not None and 0.0 < result.cpu_share <= 1.0


async def test_with_the_loops_stamps_a_stall_doubts_the_gaps_it_delayed(sim: SimServer) -> None:
    """Read-time stamps (TLS, or a kernel that does not stamp): the reads after a 50 ms stall carry late
    stamps, the ones before and well after it do not."""
    # 1.5 s: the one late sample of the stall is under LAG_SHARE of the request's (one in 17 is not)
    spec = RequestSpec(prompt="hi", max_tokens=150, extra_body=script(ttft=0.02, gaps=0.01))

    async def block_loop() -> None:
        await asyncio.sleep(0.5)
        time.sleep(0.05)

    async with ProbeClient(settings_for(sim), kernel_stamps=False) as client:
        result, _ = await asyncio.gather(client.send(spec), block_loop())
    assert result.outcome is Outcome.OK and not result.kernel_stamps
    assert result.unreliable and result.loop_lag_s >= 0.03
    if result.loop_lag_share > saturation.LAG_SHARE:  # a busy machine: late for long, every gap doubted
        assert result.doubtful_gaps == len(result.token_times)
    else:  # the 10 ms gaps that piled up in the stall, those read while the loop caught up (9-15 here)
        assert result.merged_events <= result.doubtful_gaps < len(result.token_times) // 2
