"""The simulator's aiohttp server: OpenAI-compatible routes over the engine, scripts and faults.

Routes: ``POST /v1/completions``, ``POST /v1/chat/completions``, ``POST /v1/responses`` (the Responses
API's event stream, ``responses.py``), ``GET /v1/models``, ``GET /health``,
``GET /metrics`` (vLLM's metric names), and ``GET /debug/lateness`` when ``record_lateness`` is on (the
benchmark reads write lateness from it). ``SimServer`` embeds it: ``await server.start(host, port)``
inside a running loop returns the bound ``(host, port)`` (port 0 picks a free one), ``await
server.stop()`` shuts it down.

Each request takes one of three paths: a fault (``faults.py``), a script (``scripted.py``), or the
engine (``runner.py``). Streaming responses are HTTP/1.1 chunked; their chunks are prebuilt and written
straight to the transport by the central emitter (``emitter.py``), not by the handler coroutine.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import random
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from aiohttp import web
from aiohttp.http import HttpVersion11
from prometheus_client.aiohttp import make_aiohttp_handler

from exporter.sim import tokenizer
from exporter.sim.config import Resolved, SimConfig, resolve
from exporter.sim.emitter import Emitter, LatenessRecorder
from exporter.sim.engine import Engine, SimRequest
from exporter.sim.faults import FAULT_MODES, normal_pieces, run_fault
from exporter.sim.metrics import EngineGauges, SimStats, make_registry
from exporter.sim.protocol import FaultSpec, ParsedRequest, RequestError, Script, parse_request
from exporter.sim.replies import ChunkBuilder, full_response
from exporter.sim.responses import ResponsesBuilder, full_responses_body
from exporter.sim.runner import EngineRunner
from exporter.sim.scripted import ScriptPlayer, plan_script
from exporter.sim.streams import TokenStream

log = logging.getLogger(__name__)
SHUTDOWN_TIMEOUT_S = 1.0


def output_plan(req: ParsedRequest, resolved: Resolved, rng: random.Random) -> tuple[int, str]:
    """How many tokens to generate and the finish reason when they are done.

    ``max_tokens`` given: that many, finish ``length``, unless the simulated EOS (``eos_rate`` per token,
    never before ``min_tokens``, never with ``ignore_eos``) comes first, finish ``stop``. Not given: the
    model "stops" after ``default_max_tokens`` (capped by the context left), finish ``stop``.
    """
    config = resolved.config
    room = resolved.engine.max_model_len - len(req.prompt_ids)
    limit = req.max_tokens if req.max_tokens is not None else min(config.default_max_tokens, room)
    reason = "length" if req.max_tokens is not None else "stop"
    if config.eos_rate > 0 and not req.ignore_eos:
        natural = req.min_tokens + 1
        while natural < limit and rng.random() >= config.eos_rate:
            natural += 1
        if natural < limit:
            return natural, "stop"
    return max(limit, 1), reason


@dataclass(frozen=True)
class _Job:
    """One accepted generation request on its way down one of the three paths."""

    request: web.Request
    req: ParsedRequest
    request_id: str
    seed: int
    arrival: float
    tokens: int
    reason: str


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


def _error(exc: RequestError) -> web.Response:
    return web.json_response(exc.body(), status=exc.status)


class SimServer:
    """The simulated OpenAI-compatible server, embeddable in a running event loop."""

    def __init__(self, config: SimConfig | Resolved | None = None) -> None:
        self.resolved = config if isinstance(config, Resolved) else resolve(config or SimConfig())
        self.model = self.resolved.model
        self.stats = SimStats()
        self.engine = Engine(self.resolved.engine, self.resolved.cost)
        self.recorder = LatenessRecorder() if self.resolved.config.record_lateness else None
        self.registry = make_registry(self.model, self.stats, self._gauges)
        self._ids = itertools.count(1)
        self._rng = random.Random(self.resolved.config.seed)
        self._emitter: Emitter | None = None
        self._runner: EngineRunner | None = None
        self._app_runner: web.AppRunner | None = None
        self._streams: set[TokenStream] = set()
        self.address: tuple[str, int] | None = None

    # -- lifecycle -------------------------------------------------------------------------------

    def make_app(self) -> web.Application:
        """The aiohttp application (its start-up creates the emitter on the running loop)."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", make_aiohttp_handler(self.registry))
        if self.recorder is not None:
            app.router.add_get("/debug/lateness", self._lateness)
        app.cleanup_ctx.append(self._lifecycle)
        return app

    async def _lifecycle(self, _app: web.Application) -> AsyncIterator[None]:
        self._emitter = Emitter(asyncio.get_running_loop())
        self._runner = EngineRunner(self.engine, self._emitter)
        yield
        self._runner.close()
        for stream in list(self._streams):
            stream.abort()
        self._emitter.close()

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

    def _gauges(self) -> EngineGauges:
        return EngineGauges(
            running=len(self.engine.running),
            waiting=len(self.engine.waiting),
            kv_usage=self.engine.kv_usage,
            preemptions=self.engine.num_preemptions,
            cache_queries=self.engine.cache_queries,
            cache_hits=self.engine.cache_hits,
        )

    # -- simple routes ---------------------------------------------------------------------------

    async def _health(self, _request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def _models(self, _request: web.Request) -> web.Response:
        card = {
            "id": self.model,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "fluidity-sim",
            "root": self.model,
            "parent": None,
            "max_model_len": self.resolved.engine.max_model_len,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def _lateness(self, _request: web.Request) -> web.Response:
        assert self.recorder is not None
        return web.json_response(lateness_summary(self.recorder))

    # -- generation routes -----------------------------------------------------------------------

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False, responses=True)

    async def _parse(self, request: web.Request, chat: bool, responses: bool) -> ParsedRequest:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RequestError(400, f"request body is not valid JSON: {exc}") from exc
        req = parse_request(body, chat, FAULT_MODES, responses=responses)
        if req.model != self.model:
            raise RequestError(
                404, f"The model `{req.model}` does not exist.", param="model", code="model_not_found"
            )
        limit = self.resolved.engine.max_model_len
        prompt, wanted = len(req.prompt_ids), req.max_tokens or 0
        if prompt + wanted > limit or prompt >= limit:
            raise RequestError(
                400,
                f"This model's maximum context length is {limit} tokens. However, you requested "
                f"{prompt + wanted} tokens ({prompt} in the prompt, {wanted} in the completion).",
                param="max_tokens"
                if wanted
                else ("input" if responses else "messages" if chat else "prompt"),
            )
        return req

    def _draw_fault(self) -> FaultSpec | None:
        rates = self.resolved.config.fault_rates
        if not rates:
            return None
        draw = self._rng.random()
        for mode, rate in rates.items():
            if draw < rate:
                return FaultSpec(mode=mode)
            draw -= rate
        return None

    async def _generate(
        self, request: web.Request, chat: bool, responses: bool = False
    ) -> web.StreamResponse:
        arrival = time.monotonic()
        try:
            req = await self._parse(request, chat, responses)
        except RequestError as exc:
            return _error(exc)
        number = next(self._ids)
        seed = req.seed if req.seed is not None else number
        kind = "resp" if responses else ("chatcmpl" if chat else "cmpl")
        request_id = f"{kind}-sim{number:08d}"
        tokens, reason = output_plan(req, self.resolved, random.Random(seed))
        job = _Job(request, req, request_id, seed, arrival, tokens, reason)
        fault = req.fault or self._draw_fault()
        if fault is not None:
            return await self._fault(job, fault)
        if req.script is not None:
            return await self._scripted(job, req.script)
        return await self._engine(job)

    # -- the three paths -------------------------------------------------------------------------

    async def _open(self, job: _Job) -> tuple[web.StreamResponse | None, TokenStream]:
        req = job.req
        if not req.stream:
            return None, TokenStream(req, job.seed, job.arrival, self.stats)
        chunked = job.request.version >= HttpVersion11
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        if chunked:
            resp.enable_chunked_encoding()
        await resp.prepare(job.request)
        transport = job.request.transport
        assert isinstance(transport, asyncio.Transport)
        builder = _builder(req, job.request_id, chunked)
        stream = TokenStream(
            req,
            job.seed,
            job.arrival,
            self.stats,
            transport=transport,
            builder=builder,
            recorder=self.recorder,
        )
        return resp, stream

    async def _finish(
        self, job: _Job, resp: web.StreamResponse | None, stream: TokenStream
    ) -> web.StreamResponse:
        self._streams.add(stream)
        try:
            await stream.done
        finally:
            self._streams.discard(stream)
        if resp is None:
            reason, created = stream.finish_reason or "abort", int(time.time())
            if job.req.responses:
                cached = stream.cached_tokens
                body = full_responses_body(job.req, job.request_id, created, stream.token_ids, reason, cached)
            else:
                body = full_response(job.req, job.request_id, created, stream.token_ids, reason)
                body["usage"]["prompt_tokens_details"]["cached_tokens"] = stream.cached_tokens
            return web.json_response(body)
        with contextlib.suppress(ConnectionError):  # a client that left needs no end-of-stream
            await resp.write_eof()
        return resp

    async def _engine(self, job: _Job) -> web.StreamResponse:
        assert self._runner is not None
        if len(self.engine.waiting) >= self.resolved.engine.max_waiting:
            return _error(self._queue_full())
        sim_request = SimRequest(
            len(job.req.prompt_ids),
            job.tokens,
            job.reason,
            job.arrival,
            job.seed,
            prompt_ids=job.req.prompt_ids,
        )
        resp, stream = await self._open(job)
        if not self._runner.submit(sim_request, stream):
            stream.abort()  # the queue filled while the headers were sent: end the stream
        try:
            return await self._finish(job, resp, stream)
        finally:
            self._runner.abort(sim_request)

    def _queue_full(self) -> RequestError:
        size = self.resolved.engine.max_waiting
        message = f"waiting queue is full ({size} requests); retry later"
        return RequestError(429, message, code="queue_full", err_type="rate_limit_error")

    async def _scripted(self, job: _Job, script: Script) -> web.StreamResponse:
        assert self._emitter is not None
        resp, stream = await self._open(job)
        ScriptPlayer(self._emitter, stream, plan_script(script, job.tokens), job.reason).start()
        return await self._finish(job, resp, stream)

    async def _fault(self, job: _Job, fault: FaultSpec) -> web.StreamResponse:
        req, tokens, reason = job.req, job.tokens, job.reason
        builder = _builder(req, job.request_id, http_chunked=False)
        token_ids = [tokenizer.generated_token_id(job.seed, index) for index in range(tokens)]
        if not req.stream:
            body = (
                full_responses_body(req, job.request_id, int(time.time()), token_ids, reason)
                if req.responses
                else full_response(req, job.request_id, int(time.time()), token_ids, reason)
            )
            return await run_fault(
                job.request, fault, normal_pieces([], body), False, _script_gap(req.script)
            )
        events = builder.open_events()
        for index, token_id in enumerate(token_ids):
            last = index == tokens - 1
            events.append(builder.content([token_id], index == 0, index + 1, reason if last else None))
        closing = builder.close_events(tokens, reason)
        pieces = [builder.frame([event]) for event in events]
        if fault.mode == "error_event":  # an error event after `at` chunks ends the stream
            message = "simulated failure in the middle of the stream"
            pieces = [*pieces[: fault.at], builder.frame([builder.error_event(message)])]
        elif fault.mode != "no_end":  # no_end: the body ends without the stream's last events
            pieces += [builder.frame([event]) for event in closing]
        return await run_fault(job.request, fault, pieces, True, _script_gap(req.script))


def _builder(req: ParsedRequest, request_id: str, http_chunked: bool) -> ChunkBuilder:
    kind = ResponsesBuilder if req.responses else ChunkBuilder
    return kind(req, request_id, int(time.time()), http_chunked=http_chunked)


def _script_gap(script: Script | None) -> float:
    return script.gaps[0] if script is not None else 0.01
