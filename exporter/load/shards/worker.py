"""The shard's side of the protocol: take a task from the coordinator, send the slice, stream results back.

``serve_shard`` is what ``fluidity-exporter shard`` runs, in a local worker process or in a pod of an
Indexed Job: it polls the coordinator for a task (``GET .../task``, long-polled), opens a probe client
and a first connection, reports ready and waits for the common start instant (``POST .../ready``
answers with it, as wall-clock seconds since the epoch), converts that instant once to its own
monotonic clock, sends its slice from it as a load plan through the one runner (``runner.run_plan``,
the same as in one process), and posts events every ``FLUSH_S`` (requests
started, first tokens, results), at least every ``HEARTBEAT_S`` so the coordinator can tell a live shard
from a dead one. The answer to each post says whether to stop: then the sends not yet made are dropped
and the ones in flight cancelled, and their partial results (tokens received so far) are posted too.

Clocks: the start instant crosses machines as wall-clock time, so the shards' and the coordinator's
clocks must agree (NTP, as Kubernetes nodes run it; a few ms). Each shard measures how late it actually
began against that instant on its own clock and reports it (``late_s``); the coordinator judges it.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec

from exporter.load.plan import LoadPlan
from exporter.load.runner import LoadRun, RunHooks, run_plan
from exporter.load.shards.tasks import (
    ProtocolError,
    ShardTask,
    result_to_json,
    settings_to_json,
    task_from_json,
)
from exporter.probe.client import ProbeClient, TargetError
from exporter.settings.target import TargetSettings
from exporter.streams.request import RequestSpec, Secret
from exporter.streams.result import ProbeResult

log = logging.getLogger(__name__)

FLUSH_S = 0.05  # events are posted this often while there are any (the coordinator's tally waits on them)
HEARTBEAT_S = 0.5  # and at least this often, so silence means a dead shard
POLL_WAIT_S = 20.0  # how long one task poll may wait at the coordinator
LOST_S = 10.0  # a run whose coordinator stopped answering for this long is stopped
READY_WAIT_S = 900.0  # the coordinator answers "ready" once every shard is: pods may be pulling images
# Events carry every token's stamp: msgspec encodes them ~20x faster than the json module (6 us against
# 117 us for a 32-token result, measured), a tenth of a shard's CPU per token otherwise.
EVENTS_ENCODER = msgspec.json.Encoder()
JSON_HEADERS = {"Content-Type": "application/json"}


@dataclass
class Outbox:
    """Events waiting to be posted; stamps as seconds since ``origin`` (the start instant)."""

    origin: float
    late_s: float | None = None
    started: list[list[float]] = field(default_factory=list)
    first_tokens: list[list[float]] = field(default_factory=list)
    results: list[list[Any]] = field(default_factory=list)
    in_flight: dict[int, ProbeResult] = field(default_factory=dict)
    reported_first: set[int] = field(default_factory=set)

    def on_start(self, index: int, result: ProbeResult) -> None:
        self.in_flight[index] = result
        scheduled = result.scheduled_at if result.scheduled_at is not None else time.perf_counter()
        self.started.append([index, scheduled - self.origin])

    def on_finish(self, index: int, result: ProbeResult, *, cancelled: bool = False) -> None:
        self.in_flight.pop(index, None)
        self.results.append([index, cancelled, result_to_json(result, self.origin)])

    def take(self, *, done: bool = False, stats: dict[str, Any] | None = None) -> dict[str, Any]:
        """The events since the last call (first tokens looked up now), as one post's body."""
        for index, result in self.in_flight.items():
            if result.token_times and index not in self.reported_first:
                self.reported_first.add(index)
                self.first_tokens.append([index, result.token_times[0] - self.origin])
        body: dict[str, Any] = {
            "started": self.started, "first_tokens": self.first_tokens, "results": self.results, "done": done,
        }  # fmt: skip
        if self.late_s is not None:
            body["late_s"] = self.late_s
        if stats is not None:
            body["stats"] = stats
        self.started, self.first_tokens, self.results = [], [], []
        return body

    def pending(self) -> bool:
        return bool(self.started or self.results) or any(
            r.token_times and i not in self.reported_first for i, r in self.in_flight.items()
        )


# -- sending a slice --------------------------------------------------------------------------------


async def _until(deadline: float, stopper: asyncio.Future[Any]) -> None:
    """Sleep until ``deadline`` on the perf_counter clock, or until stopped (re-sleeps after an early
    wake-up, as ``load.runner.deadline_waiter`` does): the wait for the common start."""
    while not stopper.done() and (remaining := deadline - time.perf_counter()) > 0:
        await asyncio.wait({stopper}, timeout=remaining)


class SliceSender:
    """Sends one task's entries through ``client`` as a load plan, each result to the outbox."""

    def __init__(self, client: ProbeClient, task: ShardTask, outbox: Outbox) -> None:
        self.client, self.task, self.outbox = client, task, outbox
        # In due order (ties by plan index), as the runner sends an open loop's specs in their order.
        entries = (
            sorted(task.entries, key=lambda e: (e.offset or 0.0, e.index)) if task.open_loop else task.entries
        )
        self.specs = [entry.spec for entry in entries]
        self.indices = {id(entry.spec): entry.index for entry in entries}
        if len(self.indices) != len(entries):
            raise ProtocolError(f"task {task.run}: one spec object stands for two entries")
        self.offsets = [entry.offset or 0.0 for entry in entries] if task.open_loop else None
        self.sent = 0

    def plan(self) -> LoadPlan:
        """The slice as the runner's plan: the task's offsets, or its share of the concurrency."""
        concurrency = None if self.offsets is not None else (self.task.concurrency or 1)
        return LoadPlan(self.specs, self.offsets, concurrency, duration=self.task.duration_s)

    async def send(self, spec: RequestSpec, due: float | None) -> ProbeResult:
        index = self.indices[id(spec)]
        self.sent += 1
        result = await self.client.send(spec, due, on_start=lambda r: self.outbox.on_start(index, r))
        self.outbox.on_finish(index, result)
        return result

    def cancelled_rest(self) -> None:
        """The sends the stop cut: their partial results (tokens so far) go out as cancelled."""
        for index, result in list(self.outbox.in_flight.items()):
            self.outbox.on_finish(index, result, cancelled=True)


async def run_task(
    client: ProbeClient, task: ShardTask, origin: float, outbox: Outbox, stop: asyncio.Event
) -> dict[str, Any]:
    """Send ``task``'s slice from ``origin`` (this machine's perf_counter stamp of the start instant)
    until done or ``stop``; returns the shard's figures."""
    stopper = asyncio.ensure_future(stop.wait())
    sender = SliceSender(client, task, outbox)
    run: asyncio.Future[LoadRun] | None = None
    try:
        await _until(origin, stopper)
        outbox.late_s = time.perf_counter() - origin
        cpu = time.process_time()
        if not stopper.done():
            run = asyncio.ensure_future(run_plan(sender.send, sender.plan(), RunHooks(start_at=origin)))
            await asyncio.wait({run, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stopper.done():
            await _call_off(run)
            sender.cancelled_rest()
            ended_by = "stop"
        else:
            assert run is not None
            ended_by = "duration" if run.result().stopped_by == "duration" else "requests"
        wall = time.perf_counter() - origin
        return {
            "requests": sender.sent, "cpu_s": time.process_time() - cpu, "wall_s": wall, "ended_by": ended_by,
        }  # fmt: skip
    except BaseException:
        await _call_off(run)
        sender.cancelled_rest()
        raise
    finally:
        stopper.cancel()


async def _call_off(run: asyncio.Future[LoadRun] | None) -> None:
    """Cancel the run (it cancels every send in flight) and wait for it to unwind."""
    if run is not None and not run.done():
        run.cancel()
        await asyncio.gather(run, return_exceptions=True)


# -- talking to the coordinator ---------------------------------------------------------------------


class Coordinator:
    """The coordinator's shard endpoints, for shard ``shard``."""

    def __init__(self, http: aiohttp.ClientSession, url: str, shard: int) -> None:
        self.http, self.base, self.shard = http, url.rstrip("/") + "/shards/v1", shard

    async def next_task(self, api_key: Secret | None) -> ShardTask | str | None:
        """The next task; ``"exit"`` when the coordinator is done with this shard; None: none yet."""
        url = f"{self.base}/{self.shard}/task"
        timeout = aiohttp.ClientTimeout(total=POLL_WAIT_S + 10)
        async with self.http.get(url, params={"wait": str(POLL_WAIT_S)}, timeout=timeout) as resp:
            if resp.status == 204:
                return None
            if resp.status == 410:
                return "exit"
            if resp.status != 200:
                raise ProtocolError(f"GET {url}: HTTP {resp.status}: {(await resp.text())[:200]}")
            return task_from_json(await resp.json(), api_key)

    async def ready(self, task: ShardTask) -> float | None:
        """Report ready; the answer is the start instant (epoch seconds), or None: the run was called off."""
        url = f"{self.base}/runs/{task.run}/{self.shard}/ready"
        async with self.http.post(url, json={}, timeout=aiohttp.ClientTimeout(total=READY_WAIT_S)) as resp:
            body = await resp.json()
            return float(body["start_at"]) if resp.status == 200 else None

    async def post_events(self, task: ShardTask, body: dict[str, Any]) -> bool:
        """Post events; True when the coordinator says stop."""
        url = f"{self.base}/runs/{task.run}/{self.shard}/events"
        data, timeout = EVENTS_ENCODER.encode(body), aiohttp.ClientTimeout(total=LOST_S)
        async with self.http.post(url, data=data, headers=JSON_HEADERS, timeout=timeout) as resp:
            if resp.status != 200:
                return True  # the run is unknown there (over, or the coordinator restarted): stop
            return bool((await resp.json()).get("stop"))


async def _flush_loop(coordinator: Coordinator, task: ShardTask, outbox: Outbox, stop: asyncio.Event) -> None:
    last_post = last_answer = time.monotonic()
    while True:
        await asyncio.sleep(FLUSH_S)
        now = time.monotonic()
        if not outbox.pending() and now - last_post < HEARTBEAT_S:
            continue
        body, last_post = outbox.take(), now
        try:
            if await coordinator.post_events(task, body):
                stop.set()
            last_answer = now
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            # The events are lost with the post: the coordinator counts this shard as failed if it
            # never hears of them, so the run cannot pass on partial data.
            log.warning("shard %d: posting events failed: %s", coordinator.shard, exc)
            if now - last_answer > LOST_S:
                stop.set()


class Clients:
    """One probe client per distinct target settings, open for the shard's life."""

    def __init__(self, stack: contextlib.AsyncExitStack) -> None:
        self.stack, self.clients = stack, dict[str, ProbeClient]()

    async def get(self, settings: TargetSettings) -> ProbeClient:
        key = repr(sorted(settings_to_json(settings).items()))
        if key not in self.clients:
            self.clients[key] = await self.stack.enter_async_context(ProbeClient(settings))
        return self.clients[key]


async def run_one(coordinator: Coordinator, clients: Clients, task: ShardTask) -> None:
    """One task: connect, report ready, wait for the start, send, stream events, post the final ones."""
    client = await clients.get(task.settings)
    with contextlib.suppress(TargetError):  # a target that cannot answer fails each request as a result
        await client.resolve_model()
    gc.collect()
    gc.freeze()  # what exists now lives as long as the process: out of the collector's sight
    try:
        start_at = await coordinator.ready(task)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        log.warning("shard %d: the coordinator did not start run %s: %s", coordinator.shard, task.run, exc)
        return
    if start_at is None:
        return
    origin = time.perf_counter() + (start_at - time.time())  # the one conversion to this clock
    outbox, stop = Outbox(origin), asyncio.Event()
    flusher = asyncio.create_task(_flush_loop(coordinator, task, outbox, stop))
    try:
        stats = await run_task(client, task, origin, outbox, stop)
    finally:
        flusher.cancel()
        await asyncio.gather(flusher, return_exceptions=True)
    try:
        await coordinator.post_events(task, outbox.take(done=True, stats=stats))
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:  # the run is over there: it said why
        log.warning("shard %d: the last events of run %s were lost: %s", coordinator.shard, task.run, exc)


async def serve_shard(
    url: str, shard: int, token: str | None, api_key: Secret | None, *, idle_exit_s: float = 600.0
) -> int:
    """Serve as shard ``shard`` of the coordinator at ``url`` until it says exit (0) or nothing came for
    ``idle_exit_s`` (0 without any task run, 1 when the coordinator was never reached)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with contextlib.AsyncExitStack() as stack:
        http = await stack.enter_async_context(aiohttp.ClientSession(headers=headers))
        coordinator, clients = Coordinator(http, url, shard), Clients(stack)
        try:
            async for task in _tasks(coordinator, api_key, idle_exit_s):
                if isinstance(task, int):
                    return task
                await run_one(coordinator, clients, task)
        except ProtocolError as exc:  # a refused token, another version: nothing to retry
            log.error("shard %d: %s", shard, exc)
            return 2
    return 0


async def _tasks(
    coordinator: Coordinator, api_key: Secret | None, idle_exit_s: float
) -> AsyncIterator[ShardTask | int]:
    """Tasks as they come; an int is the exit code to end with."""
    reached, last = False, time.monotonic()
    answered = last  # when the coordinator last answered
    while True:
        try:
            task = await coordinator.next_task(api_key)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            now = time.monotonic()
            # Once reached, a coordinator silent this long is gone (its process stopped or was killed): a
            # local shard once waited out the idle limit, 10 minutes, after its parent died.
            if now - last > idle_exit_s or (reached and now - answered > LOST_S):
                log.error("shard %d: the coordinator is unreachable: %s", coordinator.shard, exc)
                yield 0 if reached else 1
                return
            await asyncio.sleep(1.0)  # the coordinator is not listening yet (the job has not begun)
            continue
        reached, answered = True, time.monotonic()
        if task == "exit":
            yield 0
            return
        if isinstance(task, ShardTask):
            last = time.monotonic()
            yield task
        elif time.monotonic() - last > idle_exit_s:
            yield 0
            return
