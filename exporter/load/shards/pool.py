"""The coordinator's side of the shard protocol: a pool of K shards, each run dealt, started and merged.

Transport, HTTP rather than files on a shared volume: the coordinator (the daemon, or a CLI command)
serves four small endpoints and every shard is an HTTP client of it, so

* results stream back as they complete (a post every 50 ms), which the trial's early stopping needs,
  and the answer to each post carries the coordinator's "stop", a control channel at no extra cost;
  a shared volume would need polling of files for both, and a ReadWriteMany volume, which many
  clusters do not have;
* silence is a signal: a shard posts at least every 0.5 s, so a dead one is noticed in seconds;
* nothing is left behind to clean up, and a shard pod needs only the coordinator's address and token.

Endpoints (``Authorization: Bearer <token>`` on each):

* ``GET /shards/v1/{shard}/task?wait=S``: the shard's next task (200), none yet (204, after up to S s),
  or the coordinator is done with it (410: exit).
* ``POST /shards/v1/runs/{run}/{shard}/ready``: answered once every shard of the run is ready, with
  the common start instant ``{"start_at": <epoch s>}`` (409 when the run was called off).
* ``POST /shards/v1/runs/{run}/{shard}/events``: events (``worker.Outbox``); answers
  ``{"stop": bool}``.

``ShardPool.run`` drives one run: it deals the tasks, waits for every shard's ready (``ready_timeout``),
sets the start ``start_delay`` s ahead, feeds the caller's hooks as events arrive (``runs``: a
stand-in ``ProbeResult`` per request started, replaced in place by the final one), stops the shards
when the caller's ``stop`` is set, and returns a ``ShardRunReport``: each shard's start lateness,
figures and fate, and the problems that make the run unfit to judge (``shard_problems``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Final

import msgspec
from aiohttp import web

from exporter.load.plan import LoadPlan
from exporter.load.shards.reports import ShardRunReport, ShardState, shard_problems
from exporter.load.shards.runs import ShardHooks, ShardRun
from exporter.load.shards.tasks import (
    ProtocolError,
    ShardEntry,
    ShardTask,
    plan_specs,
    plan_tasks,
    task_to_json,
)
from exporter.settings.shards import PoolSettings
from exporter.settings.target import Secret, TargetSettings
from exporter.streams.request import RequestSpec

Alive = Callable[[int], str | None]  # why shard k is gone (e.g. "exit code -9"), or None while it runs
POOL: Final = web.AppKey["ShardPool"]("shard_pool")
MAX_BODY = 256 * 1024 * 1024  # an events post carries at most a few thousand results
NO_HOOKS: Final = ShardHooks()
EVENTS_DECODER = msgspec.json.Decoder(dict[str, Any])  # ~8x the json module on these bodies


class ShardPool:
    """A coordinator of ``shards`` shards over HTTP (see the module docstring).

    Over 150 lines, kept whole: its endpoints (task, ready, events) and the runs it drives share one
    state, the shards' queues and the runs in flight, which both sides mutate on the event loop; a
    split would pass that state between two classes that only work together. A run's own state and
    its event handling are apart already (``runs.ShardRun``)."""

    def __init__(
        self, shards: int, token: str, settings: PoolSettings | None = None, *, alive: Alive | None = None
    ) -> None:
        if shards < 1:
            raise ValueError(f"shards must be >= 1, got {shards}")
        self.shards, self.token, self.settings, self.alive = shards, token, settings or PoolSettings(), alive
        self._bearer = Secret(token)
        self.seen: dict[int, float] = {}  # shard -> last poll (monotonic)
        self.registered = asyncio.Event()
        # None in a queue: the coordinator is done with that shard.
        self._queues: dict[int, asyncio.Queue[ShardTask | None]] = {k: asyncio.Queue() for k in range(shards)}
        self._runs: dict[str, ShardRun] = {}
        self._closed = False
        self._runner: web.AppRunner | None = None
        self._ids = itertools.count(1)
        self.url = ""

    # -- serving ----------------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self._auth])
        app[POOL] = self
        app.router.add_get("/shards/v1/{shard}/task", self._task)
        app.router.add_post("/shards/v1/runs/{run}/{shard}/ready", self._ready)
        app.router.add_post("/shards/v1/runs/{run}/{shard}/events", self._events)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on ``host:port`` (port 0: any free one); returns the base URL shards use on loopback."""
        self._runner = web.AppRunner(self.make_app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0][1]
        self.url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::', '') else host}:{bound}"
        return self.url

    async def close(self) -> None:
        """Tell every shard to exit (410 on its next poll), give them a moment to hear it, stop serving."""
        self._closed = True
        for queue in self._queues.values():
            queue.put_nowait(None)
        if self._runner is not None:
            await asyncio.sleep(0.2)  # polls waiting now answer 410
            await self._runner.cleanup()
            self._runner = None

    @web.middleware
    async def _auth(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if not self._bearer.matches_bearer(request.headers.get("Authorization")):
            return web.json_response({"error": "a shard needs Authorization: Bearer <token>"}, status=401)
        return await handler(request)

    def _shard(self, request: web.Request) -> int:
        try:
            shard = int(request.match_info["shard"])
        except ValueError:
            shard = -1
        if not 0 <= shard < self.shards:
            raise web.HTTPNotFound(
                text=f'{{"error": "shard {request.match_info["shard"]}: valid 0 to {self.shards - 1}"}}',
                content_type="application/json",
            )
        return shard

    async def _task(self, request: web.Request) -> web.StreamResponse:
        shard = self._shard(request)
        self.seen[shard] = time.monotonic()
        if len(self.seen) == self.shards:
            self.registered.set()
        wait = min(float(request.query.get("wait", "0") or 0), 60.0)
        queue = self._queues[shard]
        try:
            if queue.empty() and wait > 0 and not self._closed:
                task = await asyncio.wait_for(queue.get(), wait)
            else:
                task = queue.get_nowait()
        except (TimeoutError, asyncio.QueueEmpty):
            return web.Response(status=410 if self._closed else 204)
        if task is None:
            return web.Response(status=410)
        return web.json_response(task_to_json(task))

    def _run_state(self, request: web.Request) -> tuple[ShardRun, ShardState]:
        run = self._runs.get(request.match_info["run"])
        shard = self._shard(request)
        if run is None or shard not in run.states:
            raise web.HTTPGone(text='{"error": "no such run"}', content_type="application/json")
        state = run.states[shard]
        state.last_seen = time.monotonic()
        return run, state

    async def _ready(self, request: web.Request) -> web.StreamResponse:
        run, state = self._run_state(request)
        state.ready = True
        run.check()
        await run.started.wait()
        if run.aborted or run.start_at is None:
            return web.json_response({"abort": "the run was called off"}, status=409)
        return web.json_response({"start_at": run.start_at})

    async def _events(self, request: web.Request) -> web.StreamResponse:
        run, state = self._run_state(request)
        try:
            body = EVENTS_DECODER.decode(await request.read())
        except msgspec.DecodeError as exc:
            return web.json_response({"error": f"malformed events: {exc}"}, status=400)
        if run.origin is None:
            return web.json_response({"stop": True})
        try:
            if body.get("late_s") is not None:
                state.late_s = float(body["late_s"])
            run.apply_events(state, body)
        except (ProtocolError, KeyError, TypeError, ValueError) as exc:  # a shard of another version
            return web.json_response({"error": f"malformed events: {exc}"}, status=400)
        if body.get("done"):
            state.done, state.stats = True, dict(body.get("stats") or {})
            run.check()
        return web.json_response({"stop": run.stop or run.aborted})

    # -- running ----------------------------------------------------------------------------------

    async def wait_registered(self, timeout: float) -> None:
        """Until every shard has polled once; raises ``TimeoutError`` naming the missing ones."""
        deadline = time.monotonic() + timeout
        while not self.registered.is_set():
            missing = sorted(set(range(self.shards)) - set(self.seen))
            gone = [f"shard {k} {why}" for k in missing if (why := self._gone(k)) is not None]
            if gone:
                raise TimeoutError("; ".join(gone) + " before reaching the coordinator")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"shards {missing} of {self.shards} did not reach the coordinator at {self.url} within "
                    f"{timeout:g} s"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.registered.wait(), 0.2)

    def _gone(self, shard: int) -> str | None:
        return self.alive(shard) if self.alive is not None else None

    async def run(
        self,
        tasks: Sequence[ShardTask],
        specs: dict[int, RequestSpec],
        hooks: ShardHooks = NO_HOOKS,
        start_delay_s: float | None = None,
    ) -> ShardRunReport:
        """Run ``tasks`` (one per shard taking part; ``specs``: plan index -> spec) and report; the start
        is ``start_delay_s`` (default: the pool's) after the last shard is ready."""
        by_shard = {t.shard: ShardState(t.shard, len(t.entries)) for t in tasks}
        run = ShardRun(tasks[0].run, {t.shard: t for t in tasks}, specs, hooks, by_shard)
        self._runs[run.id] = run
        try:
            for task in tasks:
                self._queues[task.shard].put_nowait(task)
            if await self._all_ready(run):
                run.start(self.settings.start_delay_s if start_delay_s is None else start_delay_s)
                await self._until_done(run, hooks.stop or asyncio.Event())
            else:
                run.aborted = True
                run.started.set()
        except BaseException:
            run.aborted = True  # the shards hear "stop" on their next post
            run.started.set()
            raise
        finally:
            self._runs.pop(run.id, None)
            self._forget(run)
        states = [run.states[k] for k in sorted(run.states)]
        return ShardRunReport(
            states, run.results, run.cancelled, shard_problems(states, self.settings), run.origin
        )

    async def run_plan(
        self, settings: TargetSettings, plan: LoadPlan, hooks: ShardHooks = NO_HOOKS
    ) -> ShardRunReport:
        """A whole plan (open loop at its offsets, or closed loop at its concurrency) dealt over the
        shards; the hooks hear each request by its index in the plan."""
        tasks = plan_tasks(self.new_run_id(), settings, plan, self.shards)
        if not tasks:
            return ShardRunReport([], {}, set(), [], None)
        return await self.run(tasks, dict(enumerate(plan_specs(plan))), hooks)

    async def run_one(
        self, settings: TargetSettings, spec: RequestSpec, shard: int, start_delay_s: float
    ) -> ShardRunReport:
        """One request alone on shard ``shard``, started ``start_delay_s`` after it is ready."""
        task = ShardTask(self.new_run_id(), shard, self.shards, settings, (ShardEntry(0, 0.0, spec),))
        return await self.run([task], {0: spec}, NO_HOOKS, start_delay_s)

    def new_run_id(self) -> str:
        return f"r{next(self._ids)}-{secrets.token_hex(4)}"

    async def _all_ready(self, run: ShardRun) -> bool:
        deadline = time.monotonic() + self.settings.ready_timeout_s
        while time.monotonic() < deadline:
            self._mark_gone(run, ready_phase=True)
            if run.all_ready.is_set() or all(s.gone for s in run.states.values()):
                return not any(s.gone for s in run.states.values())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.all_ready.wait(), 0.2)
        return False

    async def _until_done(self, run: ShardRun, stop: asyncio.Event) -> None:
        stop_deadline = math.inf
        while not run.all_done.is_set():
            if stop.is_set() and not run.stop:
                run.stop, stop_deadline = True, time.monotonic() + self.settings.stop_grace_s
            if self._mark_gone(run) and not run.stop:
                run.stop, stop_deadline = True, time.monotonic() + self.settings.stop_grace_s
            if time.monotonic() > stop_deadline:
                return
            run.check()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.all_done.wait(), 0.1)

    def _mark_gone(self, run: ShardRun, *, ready_phase: bool = False) -> bool:
        """Mark the shards that died (their process exited, or silence past the heartbeat timeout)."""
        found = False
        now = time.monotonic()
        for state in run.states.values():
            if state.gone is not None or state.done:
                continue
            reason = self._gone(state.shard)
            silent = now - state.last_seen
            if (
                reason is None
                and not ready_phase
                and state.ready
                and silent > self.settings.heartbeat_timeout_s
            ):
                reason = f"went silent for {silent:.1f} s (heartbeat timeout)"
            if reason is not None:
                state.gone, found = f"died: {reason}", True
        if found:
            run.check()
        return found

    def _forget(self, run: ShardRun) -> None:
        """Drop the run's tasks no shard took (a shard that never came)."""
        for shard in run.tasks:
            queue = self._queues[shard]
            kept = [t for t in _drain(queue) if t is None or t.run != run.id]
            for task in kept:
                queue.put_nowait(task)


def _drain(queue: asyncio.Queue[ShardTask | None]) -> list[ShardTask | None]:
    items = []
    while not queue.empty():
        items.append(queue.get_nowait())
    return items


@contextlib.asynccontextmanager
async def remote_shards(
    count: int, token: str, listen: str, settings: PoolSettings
) -> AsyncIterator[ShardPool]:
    """A coordinator listening on ``listen`` (HOST:PORT) for ``count`` shards started elsewhere (the pods
    of an Indexed Job), once all have reached it (within ``settings.ready_timeout_s``)."""
    host, _, port = listen.rpartition(":")
    pool = ShardPool(count, token, settings)
    await pool.start(host.strip("[]") or "0.0.0.0", int(port))
    try:
        await pool.wait_registered(settings.ready_timeout_s)
        yield pool
    finally:
        await pool.close()
