"""The load runner: sends requests open-loop on an absolute schedule or closed-loop at fixed concurrency.

It knows nothing of HTTP: it takes ``send(spec, scheduled_at) -> ProbeResult`` (the probe client's
``send``, or a fake in tests) and only decides *when* each request goes.

* Open loop (the plan's ``offsets``): request ``i`` is due at ``start + offsets[i]``; the runner sleeps until
  that absolute deadline (never "sleep one gap", which accumulates every wake-up's delay) and starts
  the send as its own task, so a slow target never delays later sends. ``max_in_flight`` optionally
  caps the requests in flight; when the cap holds a send back, its lateness shows it.
* Closed loop (``concurrency``): N workers each send the next request as soon as their previous one
  ends, so exactly N are in flight; ``scheduled_at`` is the moment the slot freed.

A spec with ``followups`` is a multi-turn session (``sessions.py``): it is one unit of the schedule (an
open loop's arrival starts a session, a closed loop's slot runs one session at a time), its turns go one
after the other, and each turn is a result of its own. ``max_requests`` counts sessions then.

Either stops after ``max_requests``, after ``duration`` seconds (no new sends after it; requests in
flight finish under their own timeouts), or when specs (or offsets) run out. Cancelling the run
cancels every send in flight and re-raises; so does a send that raises (a bug: target failures come
back as results), after which no further request is started. Results keep the order of the specs.

``run_plan(send, plan, hooks)`` is the one way any load runs: the plan (``plan.LoadPlan``) says what
to send and when, the hooks how it is driven. ``load_run_from_results`` computes the same ``LoadRun``
and health checks over what a shard pool returns for a plan.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Literal

from exporter.load.health import HealthCheck, Lateness, lateness, load_health
from exporter.load.plan import LoadPlan, Offsets
from exporter.load.sessions import run_session
from exporter.streams.request import RequestSpec
from exporter.streams.result import ProbeResult, intervals

Send = Callable[[RequestSpec, float | None], Awaitable[ProbeResult]]
WaitUntil = Callable[[float], Awaitable[None]]
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
OnResult = Callable[[ProbeResult], None]
StopReason = Literal["requests", "duration", "exhausted", "interrupted"]


@dataclass
class LoadRun:
    """What a load did: every result (in spec order), how it was driven, and its health checks."""

    results: list[ProbeResult]
    specs: list[RequestSpec]
    mode: Literal["open", "closed"]
    target_rate: float | None
    concurrency: int | None
    started_at: float  # clock stamp of the start of the schedule
    finished_at: float  # clock stamp when the last request ended
    stopped_by: StopReason
    from_scheduled: bool = False
    checks: list[HealthCheck] = field(default_factory=list)

    @property
    def lateness(self) -> Lateness:
        return lateness(self.results)

    @property
    def healthy(self) -> bool:
        """No check failed (unjudged checks do not count as failures)."""
        return all(check.passed is not False for check in self.checks)

    @property
    def failed_checks(self) -> list[HealthCheck]:
        return [check for check in self.checks if check.passed is False]

    def intervals(self) -> list[list[float]]:
        """Per-request intervals for ``exporter.stats``; TTFT from the scheduled time when the run was
        made with ``from_scheduled`` (charging the client's own lateness to the request)."""
        return [intervals(r, from_scheduled=self.from_scheduled) for r in self.results]


def deadline_waiter(clock: Clock = time.perf_counter, sleep: Sleep = asyncio.sleep) -> WaitUntil:
    """Waits until ``clock()`` reaches an absolute deadline. It sleeps again after an early wake-up,
    and yields once even when the deadline has passed so that the sends already started can run."""

    async def wait_until(deadline: float) -> None:
        remaining = deadline - clock()
        if remaining <= 0:
            await sleep(0)
            return
        while remaining > 0:
            await sleep(remaining)
            remaining = deadline - clock()

    return wait_until


@dataclass
class _Context:
    send: Send
    clock: Clock
    wait_until: WaitUntil
    on_result: OnResult | None
    stop: asyncio.Event | None = None  # set: send nothing new; what is in flight ends as it would
    interrupted: bool = False  # the stop left requests unsent
    start_at: float | None = None  # the schedule's start (default: when the loop begins)

    def start(self) -> float:
        return self.clock() if self.start_at is None else self.start_at

    @property
    def stopped(self) -> bool:
        return self.stop is not None and self.stop.is_set()

    async def wait_or_stop(self, deadline: float) -> None:
        """Until ``deadline``, or sooner when ``stop`` is set."""
        if self.stop is None:
            await self.wait_until(deadline)
            return
        waits = [asyncio.ensure_future(self.wait_until(deadline)), asyncio.ensure_future(self.stop.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()


Sent = list[tuple[RequestSpec, ProbeResult]]


async def _send_one(
    ctx: _Context, spec: RequestSpec, scheduled: float, slots: asyncio.Semaphore | None
) -> Sent:
    """One request, or every turn of one session: ``(spec, result)`` per request sent."""

    async def one(turn: RequestSpec, at: float | None) -> ProbeResult:
        result = await ctx.send(turn, at)
        if result.scheduled_at is None:
            result.scheduled_at = at
        if ctx.on_result is not None:
            ctx.on_result(result)
        return result

    try:
        if spec.followups:
            return await run_session(one, spec, scheduled, ctx.wait_until, ctx.clock)
        return [(spec, await one(spec, scheduled))]
    finally:
        if slots is not None:
            slots.release()


async def _cancel_all(tasks: Sequence[asyncio.Future[Any]]) -> None:
    for task in tasks:
        task.cancel()
    # Wait for each to finish unwinding; their own errors are beside the point once we are stopping.
    await asyncio.gather(*tasks, return_exceptions=True)


async def _open_loop(
    ctx: _Context,
    specs: Iterator[RequestSpec],
    offsets: Offsets,
    duration: float | None,
    max_in_flight: int | None,
) -> tuple[list[RequestSpec], list[ProbeResult], float, bool]:
    slots = asyncio.Semaphore(max_in_flight) if max_in_flight else None
    tasks: list[asyncio.Task[Sent]] = []
    crashed = asyncio.Event()  # a send raised (a bug: target failures are results): stop sending
    start = ctx.start()
    hit_duration = False
    try:
        # Offsets first: when they run out, no further spec is drawn from a lazy source.
        for offset, spec in zip(offsets, specs, strict=False):
            if duration is not None and offset >= duration:
                hit_duration = True
                break
            scheduled = start + float(offset)  # a plain float, even from a numpy schedule
            await ctx.wait_or_stop(scheduled)
            if slots is not None:
                await slots.acquire()
            if crashed.is_set() or ctx.stopped:
                ctx.interrupted = ctx.stopped
                if slots is not None:
                    slots.release()
                break
            task = asyncio.create_task(_send_one(ctx, spec, scheduled, slots))
            task.add_done_callback(lambda t: crashed.set() if not t.cancelled() and t.exception() else None)
            tasks.append(task)
        pairs = [pair for done in await asyncio.gather(*tasks) for pair in done]
    except BaseException:
        await _cancel_all(tasks)
        raise
    return [s for s, _ in pairs], [r for _, r in pairs], start, hit_duration


async def _closed_loop(
    ctx: _Context, specs: Iterator[RequestSpec], concurrency: int, duration: float | None
) -> tuple[list[RequestSpec], list[ProbeResult], float, bool]:
    units: list[Sent | None] = []  # per session (or request) started, in order
    start = ctx.start()
    expired = False

    async def worker() -> None:
        nonlocal expired
        while True:
            if duration is not None and ctx.clock() - start >= duration:
                # Cut by the duration only when a request is left unsent: the last ones ending late
                # is not a cut (the spec drawn here would not be sent either way).
                expired = expired or next(specs, None) is not None
                return
            if ctx.stopped:
                ctx.interrupted = True
                return
            spec = next(specs, None)
            if spec is None:
                return
            index = len(units)
            units.append(None)
            # No await between the previous request's end and this send: the slot never idles.
            units[index] = await _send_one(ctx, spec, ctx.clock(), None)

    workers = [asyncio.create_task(worker()) for _ in range(concurrency)]
    try:
        await asyncio.gather(*workers)
    except BaseException:
        await _cancel_all(workers)
        raise
    pairs = [pair for unit in units if unit is not None for pair in unit]
    return [s for s, _ in pairs], [r for _, r in pairs], start, expired


def _validate(plan: LoadPlan) -> None:
    if (plan.offsets is None) == (plan.concurrency is None):
        raise ValueError("give exactly one of offsets (open loop) or concurrency (closed loop)")
    if plan.concurrency is not None and plan.concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, got {plan.concurrency}")
    if plan.duration is not None and plan.duration <= 0:
        raise ValueError(f"duration must be > 0 seconds, got {plan.duration}")
    if plan.max_requests is not None and plan.max_requests < 0:
        raise ValueError(f"max_requests must be >= 0, got {plan.max_requests}")


@dataclass(frozen=True)
class RunHooks:
    """How a plan is driven, apart from what it is: ``clock`` must be the clock the probe stamps with
    (``time.perf_counter``); ``wait_until`` overrides the absolute-deadline waiter built from ``clock``
    and ``sleep``; ``on_result`` hears each result as it ends; once ``stop`` is set (an operator's
    Ctrl-C), nothing new is sent and the requests in flight end as they would; ``start_at`` is the
    schedule's start on ``clock`` (default: when the run begins; a shard's is the common start)."""

    clock: Clock = time.perf_counter
    sleep: Sleep = asyncio.sleep
    wait_until: WaitUntil | None = None
    on_result: OnResult | None = None
    stop: asyncio.Event | None = None
    start_at: float | None = None


async def run_plan(send: Send, plan: LoadPlan, hooks: RunHooks = RunHooks()) -> LoadRun:
    """Send ``plan``: open-loop at its offsets (absolute, in seconds from the start, e.g. from an
    ``ArrivalProcess``) or closed-loop at its concurrency; stop after ``max_requests``, ``duration``
    seconds, or when specs (or offsets) run out, or once ``hooks.stop`` is set (the run is then
    ``interrupted``)."""
    _validate(plan)
    specs = plan.specs
    source = iter(specs) if plan.max_requests is None else islice(specs, plan.max_requests)
    waiter = hooks.wait_until or deadline_waiter(hooks.clock, hooks.sleep)
    ctx = _Context(send, hooks.clock, waiter, hooks.on_result, hooks.stop, start_at=hooks.start_at)
    if plan.offsets is not None:
        sent, results, start, hit = await _open_loop(
            ctx, source, plan.offsets, plan.duration, plan.max_in_flight
        )
    else:
        sent, results, start, hit = await _closed_loop(ctx, source, plan.concurrency or 1, plan.duration)
    reached = plan.max_requests is not None and len(results) >= plan.max_requests
    stopped: StopReason = "duration" if hit else ("requests" if reached else "exhausted")
    if ctx.interrupted:
        stopped = "interrupted"
    return load_run_from_results(results, sent, plan, stopped, (start, hooks.clock()))


def load_run_from_results(
    results: Sequence[ProbeResult],
    specs: Sequence[RequestSpec],
    plan: LoadPlan,
    stopped_by: StopReason = "exhausted",
    span: tuple[float, float] | None = None,
) -> LoadRun:
    """A ``LoadRun`` of ``plan`` with health checks over results from anywhere (e.g. a shard pool's);
    without ``span`` (the schedule's start, the last end) it is taken from the results' own stamps."""
    starts = [r.scheduled_at for r in results if r.scheduled_at is not None]
    ends = [r.finished_at for r in results if r.finished_at is not None]
    checks = load_health(
        results,
        target_rate=plan.rate,
        concurrency=plan.concurrency,
        prompt_tokens_exact=plan.prompt_tokens_exact,
        limits=plan.limits,
    )
    return LoadRun(
        results=list(results),
        specs=list(specs),
        mode="open" if plan.concurrency is None else "closed",
        target_rate=plan.rate,
        concurrency=plan.concurrency,
        started_at=span[0] if span is not None else min(starts, default=0.0),
        finished_at=span[1] if span is not None else max(ends, default=0.0),
        stopped_by=stopped_by,
        from_scheduled=plan.from_scheduled,
        checks=checks,
    )
