"""The simulator's aiohttp server: OpenAI-compatible routes over the engine, scripts and faults.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``POST /v1/responses`` (the Responses
API's event stream, ``responses.py``), ``GET /v1/models``, ``GET /health``,
``GET /metrics`` (vLLM's metric names), and ``GET /debug/lateness`` when ``record_lateness`` is on (the
benchmark reads write lateness from it). ``SimServer`` embeds it: ``await server.start(host, port)``
inside a running loop returns the bound ``(host, port)`` (port 0 picks a free one), ``await
server.stop()`` shuts it down.

Each generation request takes one of three paths: a fault (``faults.py``), a script (``scripted.py``),
or the engine (``realtime.py``); ``generation.py`` answers them. Streaming responses are HTTP/1.1 chunked;
their chunks are prebuilt and written straight to the transport by the central emitter (``emitter.py``),
not by the handler coroutine.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
import time
from collections.abc import AsyncIterator

from aiohttp import web
from prometheus_client.aiohttp import make_aiohttp_handler

from exporter.sim.config import Resolved, SimConfig, resolve
from exporter.sim.emitter import LatenessRecorder
from exporter.sim.engine import Engine
from exporter.sim.generation import Generation
from exporter.sim.metrics import EngineGauges, SimStats, make_registry

log = logging.getLogger(__name__)
SHUTDOWN_TIMEOUT_S = 1.0


def lateness_summary(recorder: LatenessRecorder) -> dict[str, float]:
    """Write lateness since the last call (p50/p99/max, seconds), write rate and this process's CPU time."""
    intended, actual = recorder.take()
    values = sorted(a - i for i, a in zip(intended, actual, strict=True))
    summary = {"count": float(len(values)), "cpu_s": time.process_time()}
    if values:
        summary["p50"] = statistics.median(values)
        summary["p99"] = values[min(len(values) - 1, int(0.99 * len(values)))]
        summary["max"] = values[-1]
        summary["span_s"] = max(actual) - min(actual)
    return summary


def model_card(model: str, max_model_len: int, created: int) -> dict[str, object]:
    """The served model as ``GET /v1/models`` lists it (vLLM's fields)."""
    return {
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": "fluidity-sim",
        "root": model,
        "parent": None,
        "max_model_len": max_model_len,
    }


def engine_gauges(engine: Engine) -> EngineGauges:
    """What the simulator's /metrics shows of ``engine`` now."""
    return EngineGauges(
        running=len(engine.running),
        waiting=len(engine.waiting),
        kv_usage=engine.kv_usage,
        preemptions=engine.num_preemptions,
        cache_queries=engine.cache_queries,
        cache_hits=engine.cache_hits,
    )


class SimServer:
    """The simulated OpenAI-compatible server, embeddable in a running event loop."""

    def __init__(self, config: SimConfig | Resolved | None = None) -> None:
        self.resolved = config if isinstance(config, Resolved) else resolve(config or SimConfig())
        self.model = self.resolved.model
        self.stats = SimStats()
        self.engine = Engine(self.resolved.engine, self.resolved.cost)
        self.recorder = LatenessRecorder() if self.resolved.config.record_lateness else None
        self.registry = make_registry(self.model, self.stats, lambda: engine_gauges(self.engine))
        self._generation = Generation(self.resolved, self.engine, self.stats, self.recorder)
        self._app_runner: web.AppRunner | None = None
        self.address: tuple[str, int] | None = None

    def make_app(self) -> web.Application:
        """The aiohttp application (its start-up creates the emitter on the running loop)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self._generation.completions)
        app.router.add_post("/v1/chat/completions", self._generation.chat)
        app.router.add_post("/v1/responses", self._generation.responses)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", make_aiohttp_handler(self.registry))
        if self.recorder is not None:
            app.router.add_get("/debug/lateness", self._lateness)
        app.cleanup_ctx.append(self._lifecycle)
        return app

    async def _lifecycle(self, _app: web.Application) -> AsyncIterator[None]:
        self._generation.start(asyncio.get_running_loop())
        yield
        self._generation.close()

    async def start(self, host: str | None = None, port: int | None = None) -> tuple[str, int]:
        """Serve on ``host:port`` (config defaults; port 0 = any free port); returns the bound address."""
        config = self.resolved.config
        self._app_runner = web.AppRunner(
            self.make_app(), shutdown_timeout=SHUTDOWN_TIMEOUT_S, access_log=None, handle_signals=False
        )
        await self._app_runner.setup()
        site = web.TCPSite(self._app_runner, host or config.host, config.port if port is None else port)
        await site.start()
        bound = self._app_runner.addresses[0]
        self.address = (str(bound[0]), int(bound[1]))
        return self.address

    @property
    def url(self) -> str:
        """``http://host:port`` of the running server."""
        assert self.address is not None, "server not started"
        return f"http://{self.address[0]}:{self.address[1]}"

    async def stop(self) -> None:
        """Stop serving: in-flight streams end, connections close."""
        if self._app_runner is not None:
            await self._app_runner.cleanup()
            self._app_runner = None

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _models(self, _request: web.Request) -> web.Response:
        card = model_card(self.model, self.resolved.engine.max_model_len, int(time.time()))
        return web.json_response({"object": "list", "data": [card]})

    async def _lateness(self, _request: web.Request) -> web.Response:
        assert self.recorder is not None
        return web.json_response(lateness_summary(self.recorder))
