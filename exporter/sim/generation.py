"""The simulator's generation routes: each request parsed, planned and sent down one of three paths.

``Generation`` answers ``POST /v1/completions``, ``/v1/chat/completions`` and ``/v1/responses`` for
``SimServer`` (``server.py``). A request is parsed and checked against the served model and its context
(``served_request``), given its output length and finish reason (``output_plan``), then takes one of three
paths: a fault (``faults.py``; the normal response built whole and then broken, ``answer_fault``), a
script (``scripted.py``), or the engine (``realtime.py``). The last two stream through a ``TokenStream``
whose chunks the central emitter (``emitter.py``) writes straight to the transport; ``Generation`` keeps
each stream until it ends, so that a shutdown can end the ones still in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from aiohttp.http import HttpVersion11

from exporter.sim import tokenizer
from exporter.sim.config import Resolved
from exporter.sim.emitter import Emitter, LatenessRecorder
from exporter.sim.engine import Engine, SimRequest
from exporter.sim.faults import FAULT_MODES, normal_pieces, run_fault
from exporter.sim.metrics import SimStats
from exporter.sim.protocol import FaultSpec, ParsedRequest, RequestError, Script, parse_request
from exporter.sim.realtime import EngineRunner
from exporter.sim.replies import ChunkBuilder, full_response
from exporter.sim.responses import ResponsesBuilder, full_responses_body
from exporter.sim.scripted import ScriptPlayer, plan_script
from exporter.sim.streams import TokenStream


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
class Job:
    """One accepted generation request on its way down one of the three paths."""

    request: web.Request
    req: ParsedRequest
    request_id: str
    seed: int
    arrival: float
    tokens: int
    reason: str

    def sim_request(self) -> SimRequest:
        """The request as the engine tracks it."""
        req = self.req
        return SimRequest(
            len(req.prompt_ids), self.tokens, self.reason, self.arrival, self.seed, prompt_ids=req.prompt_ids
        )


def error_response(exc: RequestError) -> web.Response:
    """A refused request's JSON error, with its status."""
    return web.json_response(exc.body(), status=exc.status)


class Generation:
    """The generation routes over one engine; ``start`` on the running loop before the first request,
    ``close`` to end every stream still in flight."""

    def __init__(
        self, resolved: Resolved, engine: Engine, stats: SimStats, recorder: LatenessRecorder | None
    ) -> None:
        self.resolved = resolved
        self.engine = engine
        self.stats = stats
        self.recorder = recorder
        self._ids = itertools.count(1)
        self._rng = random.Random(resolved.config.seed)
        self._emitter: Emitter | None = None
        self._runner: EngineRunner | None = None
        self._streams: set[TokenStream] = set()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Create the emitter and the engine's runner on ``loop``."""
        self._emitter = Emitter(loop)
        self._runner = EngineRunner(self.engine, self._emitter)

    def close(self) -> None:
        """Stop the engine's runner, end the streams in flight, close the emitter."""
        assert self._runner is not None and self._emitter is not None
        self._runner.close()
        for stream in list(self._streams):
            stream.abort()
        self._emitter.close()

    async def completions(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/completions``."""
        return await self._generate(request, chat=False)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/chat/completions``."""
        return await self._generate(request, chat=True)

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """``POST /v1/responses``."""
        return await self._generate(request, chat=False, responses=True)

    async def _parse(self, request: web.Request, chat: bool, responses: bool) -> ParsedRequest:
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise RequestError(400, f"request body is not valid JSON: {exc}") from exc
        req = parse_request(body, chat, FAULT_MODES, responses=responses)
        return served_request(req, self.resolved.model, self.resolved.engine.max_model_len)

    async def _generate(
        self, request: web.Request, chat: bool, responses: bool = False
    ) -> web.StreamResponse:
        arrival = time.monotonic()
        try:
            req = await self._parse(request, chat, responses)
        except RequestError as exc:
            return error_response(exc)
        number = next(self._ids)
        seed = req.seed if req.seed is not None else number
        kind = "resp" if responses else ("chatcmpl" if chat else "cmpl")
        request_id = f"{kind}-sim{number:08d}"
        tokens, reason = output_plan(req, self.resolved, random.Random(seed))
        job = Job(request, req, request_id, seed, arrival, tokens, reason)
        fault = req.fault or draw_fault(self.resolved.config.fault_rates, self._rng)
        if fault is not None:
            return await answer_fault(job, fault)
        if req.script is not None:
            return await self._scripted(job, req.script)
        return await self._engine(job)

    # -- the streaming paths ---------------------------------------------------------------------

    async def _open(self, job: Job) -> tuple[web.StreamResponse | None, TokenStream]:
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
        self, job: Job, resp: web.StreamResponse | None, stream: TokenStream
    ) -> web.StreamResponse:
        self._streams.add(stream)
        try:
            await stream.done
        finally:
            self._streams.discard(stream)
        if resp is None:
            return web.json_response(whole_body(job, stream, int(time.time())))
        with contextlib.suppress(ConnectionError):  # a client that left needs no end-of-stream
            await resp.write_eof()
        return resp

    async def _engine(self, job: Job) -> web.StreamResponse:
        assert self._runner is not None
        if len(self.engine.waiting) >= self.resolved.engine.max_waiting:
            return error_response(queue_full(self.resolved.engine.max_waiting))
        sim_request = job.sim_request()
        resp, stream = await self._open(job)
        if not self._runner.submit(sim_request, stream):
            stream.abort()  # the queue filled while the headers were sent: end the stream
        try:
            return await self._finish(job, resp, stream)
        finally:
            self._runner.abort(sim_request)

    async def _scripted(self, job: Job, script: Script) -> web.StreamResponse:
        assert self._emitter is not None
        resp, stream = await self._open(job)
        ScriptPlayer(self._emitter, stream, plan_script(script, job.tokens), job.reason).start()
        return await self._finish(job, resp, stream)


def served_request(req: ParsedRequest, model: str, max_model_len: int) -> ParsedRequest:
    """``req`` when this server serves it: a 404 ``RequestError`` for another model, a 400 for a prompt
    and ``max_tokens`` past the context (named as vLLM names them)."""
    if req.model != model:
        raise RequestError(
            404, f"The model `{req.model}` does not exist.", param="model", code="model_not_found"
        )
    prompt, wanted = len(req.prompt_ids), req.max_tokens or 0
    if prompt + wanted > max_model_len or prompt >= max_model_len:
        raise RequestError(
            400,
            f"This model's maximum context length is {max_model_len} tokens. However, you requested "
            f"{prompt + wanted} tokens ({prompt} in the prompt, {wanted} in the completion).",
            param="max_tokens"
            if wanted
            else ("input" if req.responses else "messages" if req.chat else "prompt"),
        )
    return req


def draw_fault(rates: Mapping[str, float], rng: random.Random) -> FaultSpec | None:
    """A fault drawn at its configured rate (``fault_rates``: mode -> share of requests), or None."""
    if not rates:
        return None
    draw = rng.random()
    for mode, rate in rates.items():
        if draw < rate:
            return FaultSpec(mode=mode)
        draw -= rate
    return None


def queue_full(size: int) -> RequestError:
    """The 429 of a request that finds the waiting queue full."""
    message = f"waiting queue is full ({size} requests); retry later"
    return RequestError(429, message, code="queue_full", err_type="rate_limit_error")


def whole_body(job: Job, stream: TokenStream, created: int) -> dict[str, Any]:
    """The JSON body of a finished non-streaming request, with the prompt tokens its cache served."""
    reason = stream.finish_reason or "abort"
    if job.req.responses:
        cached = stream.cached_tokens
        return full_responses_body(job.req, job.request_id, created, stream.token_ids, reason, cached)
    body = full_response(job.req, job.request_id, created, stream.token_ids, reason)
    body["usage"]["prompt_tokens_details"]["cached_tokens"] = stream.cached_tokens
    return body


async def answer_fault(job: Job, fault: FaultSpec) -> web.StreamResponse:
    """The fault path: the normal response, built whole at once, with ``fault`` applied to it."""
    req = job.req
    token_ids = [tokenizer.generated_token_id(job.seed, index) for index in range(job.tokens)]
    if not req.stream:
        created = int(time.time())
        body = (
            full_responses_body(req, job.request_id, created, token_ids, job.reason)
            if req.responses
            else full_response(req, job.request_id, created, token_ids, job.reason)
        )
        return await run_fault(job.request, fault, normal_pieces([], body), False, _script_gap(req.script))
    pieces = faulted_events(_builder(req, job.request_id, http_chunked=False), token_ids, job.reason, fault)
    return await run_fault(job.request, fault, pieces, True, _script_gap(req.script))


def faulted_events(builder: ChunkBuilder, token_ids: list[int], reason: str, fault: FaultSpec) -> list[bytes]:
    """A stream's SSE frames, one event each, as ``fault`` leaves them: cut by an error event after
    ``fault.at`` chunks (``error_event``), without its last events (``no_end``), or whole."""
    tokens = len(token_ids)
    events = builder.open_events()
    for index, token_id in enumerate(token_ids):
        last = index == tokens - 1
        events.append(builder.content([token_id], index == 0, index + 1, reason if last else None))
    closing = builder.close_events(tokens, reason)  # before the error event: it numbers the events
    pieces = [builder.frame([event]) for event in events]
    if fault.mode == "error_event":  # an error event after `at` chunks ends the stream
        message = "simulated failure in the middle of the stream"
        return [*pieces[: fault.at], builder.frame([builder.error_event(message)])]
    if fault.mode != "no_end":  # no_end: the body ends without the stream's last events
        pieces += [builder.frame([event]) for event in closing]
    return pieces


def _builder(req: ParsedRequest, request_id: str, http_chunked: bool) -> ChunkBuilder:
    kind = ResponsesBuilder if req.responses else ChunkBuilder
    return kind(req, request_id, int(time.time()), http_chunked=http_chunked)


def _script_gap(script: Script | None) -> float:
    return script.gaps[0] if script is not None else 0.01
