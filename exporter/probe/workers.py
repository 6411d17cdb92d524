"""Send a plan of requests on an absolute schedule, in this process or spread over worker processes.

A plan is a sequence of ``(offset, spec)``: request ``i`` is due at ``start + offset_i`` on the
``time.perf_counter`` clock (CLOCK_MONOTONIC on Linux: one clock for every process on the machine), so
lateness never accumulates (no drift) and each result's ``scheduled_at`` is its due time.

``run_plan(client, plan)`` does it on the running event loop. ``run_plan_in_workers(settings, plan,
workers)`` deals the plan round-robin to ``workers`` processes (``spawn`` context: no inherited event loop
or sockets), each with one event loop and one ``ProbeClient``, so one core's saturation no longer bends
the timestamps; every worker first connects and reports ready, then all start at one common start time,
and the results come back in plan order. Everything crossing processes pickles (settings, specs, results).

The commands' ``--workers`` (bench, capacity, profile) and the daemon's jobs use the shard protocol
instead (``exporter.load.shard_pool``): results stream back while the load runs, so a capacity trial can
stop early, and the same protocol reaches pods on other machines. This module remains the minimal form
the probe benchmark compares against.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from exporter.probe import loop as event_loop
from exporter.probe.client import ProbeClient, TargetError
from exporter.probe.result import ProbeResult
from exporter.probe.target import RequestSpec
from exporter.settings.target import TargetSettings

Plan = Sequence[tuple[float, RequestSpec]]
# A worker's start-up (spawn, imports, first connection) must not take longer than this.
READY_TIMEOUT_S = 60.0
_POLL_S = 0.2


async def run_plan(client: ProbeClient, plan: Plan, *, start: float | None = None) -> list[ProbeResult]:
    """Send every request of ``plan`` at ``start + offset`` (default start: now); results in plan order."""
    if start is None:
        start = time.perf_counter()
    order = sorted(range(len(plan)), key=lambda i: plan[i][0])
    tasks: list[asyncio.Task[ProbeResult] | None] = [None] * len(plan)
    try:
        for index in order:
            offset, spec = plan[index]
            due = start + offset
            # Again after an early wake-up: uvloop's timers have millisecond grain and may fire early.
            while (delay := due - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            tasks[index] = asyncio.create_task(client.send(spec, scheduled_at=due))
        return list(await asyncio.gather(*(t for t in tasks if t is not None)))
    except BaseException:
        for task in tasks:
            if task is not None:
                task.cancel()
        raise


def _deal(plan: Plan, workers: int) -> list[list[tuple[int, float, RequestSpec]]]:
    """Round-robin by due time, so every worker gets an even share of every part of the schedule."""
    shares: list[list[tuple[int, float, RequestSpec]]] = [[] for _ in range(workers)]
    order = sorted(range(len(plan)), key=lambda i: plan[i][0])
    for rank, index in enumerate(order):
        offset, spec = plan[index]
        shares[rank % workers].append((index, offset, spec))
    return shares


@dataclass(frozen=True)
class WorkerStats:
    """What one worker process spent on its share of the plan (start-up excluded)."""

    requests: int
    cpu_s: float  # this process's CPU time (user + system) from the common start to its last result
    wall_s: float


async def _worker_async(
    settings: TargetSettings, share: list[tuple[int, float, RequestSpec]], conn: Connection
) -> tuple[list[tuple[int, ProbeResult]], WorkerStats]:
    async with ProbeClient(settings) as client:
        # Also opens a first connection; a target that cannot answer fails each request as a result.
        with contextlib.suppress(TargetError):
            await client.resolve_model()
        # Everything allocated so far lives as long as the process: out of the collector's sight, so a
        # full collection in the middle of the plan costs less loop lag.
        gc.freeze()
        conn.send(("ready", None))
        start = await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        cpu = time.process_time()
        results = await run_plan(client, [(offset, spec) for _, offset, spec in share], start=start)
        stats = WorkerStats(len(share), time.process_time() - cpu, time.perf_counter() - start)
    return [(index, result) for (index, _, _), result in zip(share, results, strict=True)], stats


def _worker_main(
    settings: TargetSettings, share: list[tuple[int, float, RequestSpec]], conn: Connection
) -> None:
    """A worker process: connect, report ready, wait for the common start, run its share, send results."""
    try:
        conn.send(("done", event_loop.run(_worker_async(settings, share, conn))))
    except BaseException as exc:  # report it to the parent rather than dying silently
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
        raise
    finally:
        conn.close()


def _expect(conn: Connection, proc: Any, what: str, timeout: float | None) -> Any:
    deadline = None if timeout is None else time.monotonic() + timeout
    while not conn.poll(_POLL_S):
        if not proc.is_alive() and not conn.poll(0):
            raise RuntimeError(f"probe worker {proc.name} died (exit code {proc.exitcode}) before {what}")
        if deadline is not None and time.monotonic() > deadline:
            raise RuntimeError(f"probe worker {proc.name} not {what} within {timeout} s")
    kind, payload = conn.recv()
    if kind == "error":
        raise RuntimeError(f"probe worker {proc.name} failed: {payload}")
    return payload


def run_plan_in_workers(
    settings: TargetSettings,
    plan: Plan,
    workers: int,
    *,
    start_delay: float = 0.5,
    stats: list[WorkerStats] | None = None,
) -> list[ProbeResult]:
    """Run ``plan`` over ``workers`` processes; the common start is ``start_delay`` s after all are ready.

    Blocks until every request is done (call it from a thread, e.g. ``asyncio.to_thread``, inside a loop).
    When ``stats`` is given, each worker's ``WorkerStats`` is appended to it. Raises ``RuntimeError`` when
    a worker fails (a bug of ours; target failures are results).
    """
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    context = multiprocessing.get_context("spawn")
    procs, conns = [], []
    try:
        for number, share in enumerate(_deal(plan, workers)):
            parent, child = context.Pipe()
            proc = context.Process(
                target=_worker_main, args=(settings, share, child), name=f"probe-worker-{number}", daemon=True
            )
            proc.start()
            child.close()
            procs.append(proc)
            conns.append(parent)
        for conn, proc in zip(conns, procs, strict=True):
            _expect(conn, proc, "ready", READY_TIMEOUT_S)
        start = time.perf_counter() + start_delay
        for conn in conns:
            conn.send(start)
        results: list[ProbeResult | None] = [None] * len(plan)
        for conn, proc in zip(conns, procs, strict=True):
            indexed, worker_stats = _expect(conn, proc, "done", None)
            for index, result in indexed:
                results[index] = result
            if stats is not None:
                stats.append(worker_stats)
        missing = [index for index, result in enumerate(results) if result is None]
        if missing:
            raise RuntimeError(f"probe workers returned no result for plan entries {missing[:10]}")
        return [r for r in results if r is not None]
    finally:
        for proc in procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
        for conn in conns:
            conn.close()
