"""The load runner on a real event loop with fake async sends: absolute schedule without drift,
closed-loop concurrency, stops, order, cancellation, and health checks that catch a bad load.

Timing assertions leave wide margins: this VM is noisy and asyncio wakes up to ~1 ms late (epoll
timeouts are whole milliseconds)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import numpy as np
import pytest

from exporter.load.health import rates
from exporter.load.plan import LoadPlan
from exporter.load.presets import preset
from exporter.load.runner import RunHooks, Send, deadline_waiter, load_run_from_results, run_plan
from exporter.settings.arrival import Constant, Poisson
from exporter.streams.request import RequestSpec
from exporter.streams.result import Outcome, ProbeResult


def _specs(n: int, max_tokens: int = 4) -> list[RequestSpec]:
    return [RequestSpec(f"p{i}", max_tokens, 10, None, f"r{i}") for i in range(n)]


def fake_send(
    delay: float | Callable[[RequestSpec], float] = 0.005, *, block: float = 0.0, tokens: int | None = None
) -> Send:
    """A target that takes ``delay`` seconds and streams ``max_tokens`` tokens (``tokens`` to cut it
    short). ``block`` burns the event loop synchronously, as a saturated client would."""

    async def send(spec: RequestSpec, scheduled_at: float | None) -> ProbeResult:
        sent = time.perf_counter()
        if block:
            time.sleep(block)
        await asyncio.sleep(delay(spec) if callable(delay) else delay)
        now = time.perf_counter()
        count = spec.max_tokens if tokens is None else tokens
        return ProbeResult(
            api="completions",
            scheduled_at=scheduled_at,
            sent_at=sent,
            token_times=[now] * count,
            token_counts=[1] * count,
            finished_at=now,
            prompt_tokens_intended=spec.prompt_tokens,
            prompt_tokens_reported=spec.prompt_tokens,
            completion_tokens_reported=count,
            max_tokens=spec.max_tokens,
            extra={"id": spec.request_id},
        )

    return send


async def test_open_loop_keeps_an_absolute_schedule_without_drift() -> None:
    offsets = Constant(200.0).offsets(200, np.random.default_rng(0))
    run = await run_plan(fake_send(0.02), LoadPlan(_specs(200), offsets=offsets, rate=200.0))
    assert len(run.results) == 200 and run.mode == "open" and run.stopped_by == "exhausted"
    start = run.started_at
    planned = np.array([r.scheduled_at - start for r in run.results])  # type: ignore[operator]
    assert np.allclose(planned, offsets)
    late = np.array([r.sent_at - r.scheduled_at for r in run.results])  # type: ignore[operator]
    assert late.min() >= 0
    assert np.median(late) < 0.004
    # No drift: the end of the run is as punctual as its beginning (a relative sleep would add up).
    assert np.median(late[-50:]) < 0.004
    assert run.results[-1].sent_at - start == pytest.approx(offsets[-1], abs=0.02)  # type: ignore[operator]
    assert rates(run.results)[0] == pytest.approx(200.0, rel=0.05)
    assert run.healthy, [c.message for c in run.failed_checks]


async def test_open_loop_requests_run_concurrently_and_keep_spec_order() -> None:
    # Earlier requests take longer, so completions arrive in reverse order.
    send = fake_send(lambda spec: 0.2 - 0.01 * int(spec.prompt[1:]))
    began = time.perf_counter()
    run = await run_plan(send, LoadPlan(_specs(10), offsets=[0.001 * i for i in range(10)]))
    assert time.perf_counter() - began < 0.5  # not 10 x 0.1 s in series
    assert [r.extra["id"] for r in run.results] == [f"r{i}" for i in range(10)]
    assert [s.request_id for s in run.specs] == [f"r{i}" for i in range(10)]


async def test_closed_loop_keeps_exactly_n_in_flight() -> None:
    in_flight = 0
    seen: list[int] = []
    inner = fake_send(lambda spec: 0.005 + 0.003 * (int(spec.prompt[1:]) % 5))

    async def send(spec: RequestSpec, scheduled_at: float | None) -> ProbeResult:
        nonlocal in_flight
        in_flight += 1
        seen.append(in_flight)
        try:
            return await inner(spec, scheduled_at)
        finally:
            in_flight -= 1

    run = await run_plan(send, LoadPlan(_specs(60), concurrency=4))
    assert len(run.results) == 60 and run.mode == "closed"
    assert max(seen) == 4
    # Every request after the first four starts the moment another ends: still 4 in flight.
    assert seen[:4] == [1, 2, 3, 4]
    assert all(count == 4 for count in seen[4:])
    check = {c.name: c for c in run.checks}["concurrency"]
    assert check.passed and check.observed == pytest.approx(4, rel=0.05)
    assert [r.extra["id"] for r in run.results] == [f"r{i}" for i in range(60)]


async def test_open_loop_stops_at_the_duration() -> None:
    offsets = Poisson(100.0).offsets(1000, np.random.default_rng(1))
    run = await run_plan(fake_send(0.01), LoadPlan(_specs(1000), offsets=offsets, duration=0.3))
    assert run.stopped_by == "duration"
    expected = int(np.sum(offsets < 0.3))
    assert len(run.results) == expected
    assert all(r.scheduled_at - run.started_at < 0.3 for r in run.results)  # type: ignore[operator]


async def test_closed_loop_stops_at_the_duration_and_max_requests() -> None:
    run = await run_plan(fake_send(0.02), LoadPlan(_specs(1000), concurrency=2, duration=0.2))
    assert run.stopped_by == "duration"
    assert 10 <= len(run.results) <= 24  # ~2 x 0.2 / 0.02, plus the in-flight pair
    run = await run_plan(fake_send(0.001), LoadPlan(_specs(100), concurrency=3, max_requests=7))
    assert run.stopped_by == "requests" and len(run.results) == 7


async def test_a_closed_loop_that_sent_every_request_was_not_cut_by_its_duration() -> None:
    # 4 requests of 0.3 s over 2 slots: the last two start at 0.3 s, before the 0.45 s duration, and
    # end after it. Every request was sent: the run ended by its requests, not by the duration.
    run = await run_plan(fake_send(0.3), LoadPlan(_specs(4), concurrency=2, duration=0.45))
    assert len(run.results) == 4 and run.stopped_by == "exhausted"


async def test_lazy_specs_for_a_duration_limited_closed_loop() -> None:
    workload = preset("lmsys", api="completions")
    run = await run_plan(
        fake_send(0.01), LoadPlan(workload.stream(np.random.default_rng(0)), concurrency=3, duration=0.15)
    )
    assert run.stopped_by == "duration"
    assert 9 <= len(run.results) <= 60
    assert len({s.request_id for s in run.specs}) == len(run.specs) == len(run.results)
    assert all(r.max_tokens == s.max_tokens for r, s in zip(run.results, run.specs, strict=True))


async def test_lazy_specs_draw_only_what_is_sent() -> None:
    drawn = 0

    def specs() -> Iterator[RequestSpec]:
        nonlocal drawn
        for spec in _specs(100):
            drawn += 1
            yield spec

    run = await run_plan(fake_send(0.001), LoadPlan(specs(), offsets=[0.0, 0.001, 0.002]))
    assert len(run.results) == 3 and drawn == 3 and run.stopped_by == "exhausted"
    run = await run_plan(fake_send(0.001), LoadPlan(_specs(5), concurrency=2))
    assert len(run.results) == 5 and run.stopped_by == "exhausted"


async def test_max_requests() -> None:
    offsets = [0.0, 0.01, 0.02, 0.5]
    run = await run_plan(fake_send(0.001), LoadPlan(_specs(4), offsets=offsets, max_requests=2))
    assert len(run.results) == 2 and run.stopped_by == "requests"


async def _cancel_while_in_flight(
    start: Callable[[Send], Coroutine[Any, Any, object]], expected_in_flight: int
) -> None:
    started = 0
    cancelled = 0
    all_started = asyncio.Event()

    async def send(spec: RequestSpec, scheduled_at: float | None) -> ProbeResult:
        nonlocal started, cancelled
        started += 1
        if started == expected_in_flight:
            all_started.set()
        try:
            await asyncio.Event().wait()  # a target that never answers
        except asyncio.CancelledError:
            cancelled += 1
            raise
        raise AssertionError("unreachable")

    task = asyncio.create_task(start(send))
    await asyncio.wait_for(all_started.wait(), 2.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cancelled == started == expected_in_flight


async def test_cancelling_an_open_loop_cancels_sends_in_flight() -> None:
    await _cancel_while_in_flight(
        lambda send: run_plan(send, LoadPlan(_specs(100), offsets=[0.0] * 5 + [10.0] * 95)), 5
    )


async def test_cancelling_a_closed_loop_cancels_sends_in_flight() -> None:
    await _cancel_while_in_flight(lambda send: run_plan(send, LoadPlan(_specs(100), concurrency=3)), 3)


@pytest.mark.parametrize("loop", ["open", "closed"])
async def test_a_stop_sends_nothing_new_and_lets_the_sends_in_flight_end(loop: str) -> None:
    stop = asyncio.Event()
    offsets = [0.02 * i for i in range(100)] if loop == "open" else None
    concurrency = 2 if loop == "closed" else None
    running = asyncio.ensure_future(
        run_plan(
            fake_send(0.05),
            LoadPlan(_specs(100), offsets=offsets, concurrency=concurrency),
            RunHooks(stop=stop),
        )
    )
    await asyncio.sleep(0.2)
    stop.set()  # an operator's Ctrl-C, mid-run: a 2 s open loop, a closed loop of 100 x 50 ms / 2
    run = await asyncio.wait_for(running, timeout=5)
    assert run.stopped_by == "interrupted"
    assert 0 < len(run.results) < 30  # what was sent before the stop, no more
    assert all(r.outcome is Outcome.OK for r in run.results)  # those in flight ended, not cancelled


async def test_a_stop_after_the_last_send_leaves_the_run_complete() -> None:
    stop = asyncio.Event()
    running = asyncio.ensure_future(
        run_plan(fake_send(0.1), LoadPlan(_specs(3), offsets=[0.0, 0.0, 0.0]), RunHooks(stop=stop))
    )
    await asyncio.sleep(0.03)  # all three sent, none ended
    stop.set()
    run = await asyncio.wait_for(running, timeout=5)
    assert run.stopped_by == "exhausted" and len(run.results) == 3  # nothing was left unsent


async def test_a_bug_in_send_propagates_and_cancels_the_rest() -> None:
    cancelled = 0

    async def send(spec: RequestSpec, scheduled_at: float | None) -> ProbeResult:
        nonlocal cancelled
        if spec.request_id == "r2":
            raise RuntimeError("bug in the client")
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled += 1
            raise
        raise AssertionError("unreachable")

    with pytest.raises(RuntimeError, match="bug in the client"):
        await run_plan(send, LoadPlan(_specs(4), offsets=[0.0, 0.0, 0.0, 0.0]))
    assert cancelled == 3


async def test_a_bug_in_send_stops_the_open_loop_from_sending_more() -> None:
    sent: list[str] = []

    async def send(spec: RequestSpec, scheduled_at: float | None) -> ProbeResult:
        sent.append(spec.request_id or "")
        if spec.request_id == "r1":
            raise RuntimeError("bug in the client")
        return await fake_send(0.001)(spec, scheduled_at)

    with pytest.raises(RuntimeError, match="bug in the client"):
        await run_plan(send, LoadPlan(_specs(50), offsets=[0.01 * i for i in range(50)]))
    assert sent[:2] == ["r0", "r1"] and len(sent) <= 4  # stopped at once, not 0.5 s later


async def test_health_flags_a_sender_that_blocks_the_loop() -> None:
    offsets = Constant(200.0).offsets(40, np.random.default_rng(0))
    run = await run_plan(fake_send(0.001, block=0.015), LoadPlan(_specs(40), offsets=offsets, rate=200.0))
    checks = {c.name: c for c in run.checks}
    assert checks["send_rate"].passed is False
    assert checks["send_rate"].observed is not None and checks["send_rate"].observed < 100
    assert (
        "fell behind" in checks["send_rate"].message
        and "nominal target 200 req/s" in checks["send_rate"].message
    )
    assert checks["send_lateness"].passed is False
    assert not run.healthy


async def test_health_flags_a_slow_target_behind_an_in_flight_cap() -> None:
    offsets = Constant(100.0).offsets(30, np.random.default_rng(0))
    run = await run_plan(fake_send(0.05), LoadPlan(_specs(30), offsets=offsets, max_in_flight=2, rate=100.0))
    checks = {c.name: c for c in run.checks}
    assert checks["send_rate"].passed is False  # ~40 req/s achieved of 100 planned
    assert checks["send_lateness"].passed is False
    assert {c.name for c in run.failed_checks} >= {"send_rate", "send_lateness"}


async def test_health_flags_short_outputs_and_passes_a_healthy_run() -> None:
    offsets = Constant(100.0).offsets(20, np.random.default_rng(0))
    healthy = await run_plan(
        fake_send(0.002), LoadPlan(_specs(20, 8), offsets=offsets, prompt_tokens_exact=True)
    )
    assert healthy.healthy
    assert [c.name for c in healthy.checks] == [
        "send_rate", "send_lateness", "prompt_tokens", "output_tokens", "unreliable", "doubtful_gaps",
        "success",
    ]  # fmt: skip
    short = await run_plan(fake_send(0.002, tokens=3), LoadPlan(_specs(20, 8), offsets=offsets))
    check = {c.name: c for c in short.checks}["output_tokens"]
    assert check.passed is False and check.observed == 0.0
    assert "median got/asked 0.38" in check.message


async def test_from_scheduled_charges_lateness_to_ttft() -> None:
    run = await run_plan(
        fake_send(0.01, block=0.01), LoadPlan(_specs(3), offsets=[0.0, 0.0, 0.0], from_scheduled=True)
    )
    result = run.results[2]
    assert run.intervals()[2][0] == pytest.approx(result.token_times[0] - result.scheduled_at)  # type: ignore[operator]
    assert run.intervals()[2][0] > result.token_times[0] - result.sent_at  # type: ignore[operator]


async def test_on_result_sees_every_result() -> None:
    seen: list[ProbeResult] = []
    run = await run_plan(
        fake_send(0.001), LoadPlan(_specs(5), concurrency=2), RunHooks(on_result=seen.append)
    )
    assert sorted(id(r) for r in seen) == sorted(id(r) for r in run.results)


async def test_deadline_waiter_wakes_at_the_deadline_and_yields_when_late() -> None:
    wait_until = deadline_waiter()
    target = time.perf_counter() + 0.03
    await wait_until(target)
    # Never early; late only by the VM's own scheduling.
    assert 0 <= time.perf_counter() - target < 0.05
    ran = False

    async def other() -> None:
        nonlocal ran
        ran = True

    task = asyncio.create_task(other())
    await wait_until(time.perf_counter() - 1)  # already late: returns, but lets the task run first
    assert ran
    await task


async def test_injected_clock_and_waiter_make_schedules_testable_without_sleeping() -> None:
    now = 100.0
    waits: list[float] = []

    async def wait_until(deadline: float) -> None:
        nonlocal now
        waits.append(deadline)
        now = max(now, deadline)

    async def send(spec: RequestSpec, scheduled_at: float | None) -> ProbeResult:
        return ProbeResult(api="chat", sent_at=now, finished_at=now + 1)

    run = await run_plan(
        send, LoadPlan(_specs(3), offsets=[0.0, 2.0, 5.0]), RunHooks(clock=lambda: now, wait_until=wait_until)
    )
    assert waits == [100.0, 102.0, 105.0]
    assert [r.scheduled_at for r in run.results] == [100.0, 102.0, 105.0]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "give exactly one of offsets (open loop) or concurrency (closed loop)"),
        (
            {"offsets": [0.0], "concurrency": 2},
            "give exactly one of offsets (open loop) or concurrency (closed loop)",
        ),
        ({"concurrency": 0}, "concurrency must be >= 1, got 0"),
        ({"concurrency": 1, "duration": 0}, "duration must be > 0 seconds, got 0"),
        ({"concurrency": 1, "max_requests": -1}, "max_requests must be >= 0, got -1"),
    ],
)
async def test_argument_errors(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        await run_plan(fake_send(), LoadPlan(_specs(2), **kwargs))  # type: ignore[arg-type]
    assert str(caught.value) == message


def test_load_run_from_worker_results() -> None:
    results = [
        ProbeResult(api="chat", scheduled_at=10.0 + i * 0.1, sent_at=10.0 + i * 0.1 + 0.001,
                    finished_at=11.0 + i, max_tokens=2, token_times=[10.5, 10.6], token_counts=[1, 1],
                    outcome=Outcome.OK)
        for i in range(10)
    ]  # fmt: skip
    run = load_run_from_results(results, _specs(10), LoadPlan(_specs(10), offsets=[], rate=10.0))
    assert run.started_at == 10.0 and run.finished_at == 20.0
    assert rates(run.results) == (pytest.approx(10.0), pytest.approx(10.0))
    assert run.lateness.p50 == pytest.approx(0.001)
    assert run.healthy
