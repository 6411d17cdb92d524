"""The observer: a gRPC ``ExternalProcessor`` server (grpcio's asyncio API) that Envoy's ``ext_proc``
filter streams each HTTP exchange to, one ``Process`` stream per request.

The handler stamps each message with the injected clock (``time.perf_counter``) the moment it has it and
hands it to the exchange's ``ObservedStream``; decoding and every figure happen there and after. In
observability mode Envoy ignores answers and the protocol says to send none; a message sent without it
(a filter configured to wait) gets the empty answer that lets the exchange continue unchanged, so a
misconfigured Envoy is slowed, never broken. Streams past ``max_streams`` are closed at once (Envoy goes
on without the observer) and counted; a bug in decoding is logged with its traceback and counted, and
ends only that stream's record.

A user's record goes to ``sink``, a probe's (marked by the exporter's own client) to ``probe_sink``. The
observer's own event loop is watched by the probe client's ``LagMonitor`` while streams are open, and
each record judged by the client's rule (``ProbeResult.unreliable``): its stamps are the loop's.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from exporter.settings.traffic import MAX_MODELS, TrafficConfig
from exporter.streams.saturation import LagMonitor
from exporter.traffic._proto.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from exporter.traffic._proto.envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from exporter.traffic.record import (
    ERROR,
    OVER_CAPACITY,
    Ignored,
    Observed,
    ObservedStream,
    StreamEnd,
    StreamLimits,
)

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Sink = Callable[[Observed], None]
# The empty answer to each kind of message, for a filter that waits for one (not observability mode).
_ANSWERS: dict[str, Callable[[], pb.ProcessingResponse]] = {
    "request_headers": lambda: pb.ProcessingResponse(request_headers=pb.HeadersResponse()),
    "response_headers": lambda: pb.ProcessingResponse(response_headers=pb.HeadersResponse()),
    "request_body": lambda: pb.ProcessingResponse(request_body=pb.BodyResponse()),
    "response_body": lambda: pb.ProcessingResponse(response_body=pb.BodyResponse()),
    "request_trailers": lambda: pb.ProcessingResponse(request_trailers=pb.TrailersResponse()),
    "response_trailers": lambda: pb.ProcessingResponse(response_trailers=pb.TrailersResponse()),
}


_END_OF_REASON = {
    Ignored.NOT_LLM.value: StreamEnd.NOT_LLM,
    Ignored.NOT_STREAMING.value: StreamEnd.NOT_STREAMING,
}


@dataclass
class ObserverCounts:
    """What the observer saw besides records: streams open now and the Envoy connections they came
    on, streams without a record by reason (``record.SKIP_REASONS``), every stream by how it ended,
    and the stamp of Envoy's latest message."""

    in_flight: int = 0
    streams: int = 0
    messages: int = 0  # every message Envoy sent on an observed stream
    skipped: Counter[str] = field(default_factory=Counter)
    ends: Counter[StreamEnd] = field(default_factory=Counter)  # every stream once, by how it ended
    peers: Counter[str] = field(default_factory=Counter)  # open streams by Envoy's address
    last_message_at: float | None = None  # the observer's clock

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1
        self.ends[_END_OF_REASON.get(reason, StreamEnd.DROPPED)] += 1


def _headers(message: Any) -> list[tuple[str, bytes]]:
    return [(h.key, h.raw_value or h.value.encode()) for h in message.headers.headers]


def feed(stream: ObservedStream, now: float, message: pb.ProcessingRequest) -> None:
    """One message to its exchange's record (nothing once the exchange is ignored)."""
    if not stream.watching:
        return
    kind = message.WhichOneof("request")
    if kind == "request_headers":
        part = message.request_headers
        stream.on_request_headers(now, _headers(part), part.end_of_stream)
    elif kind == "request_body":
        stream.on_request_body(now, message.request_body.body, message.request_body.end_of_stream)
    elif kind == "response_headers":
        part = message.response_headers
        stream.on_response_headers(now, _headers(part), part.end_of_stream)
    elif kind == "response_body":
        stream.on_response_body(now, message.response_body.body, message.response_body.end_of_stream)


def _peer(context: Any) -> str:
    """Envoy's address as gRPC gives it (``ipv4:127.0.0.1:50321``): one per connection."""
    try:
        return str(context.peer())
    except Exception:  # a context without a peer (not grpcio's) counts as one connection
        return ""


class _Servicer(pb_grpc.ExternalProcessorServicer):
    def __init__(self, observer: TrafficObserver) -> None:
        self._observer = observer

    async def Process(  # noqa: N802 (the gRPC method's name)
        self, request_iterator: AsyncIterator[pb.ProcessingRequest], context: Any
    ) -> AsyncIterator[pb.ProcessingResponse]:
        observer, counts = self._observer, self._observer.counts
        if counts.in_flight >= observer.max_streams:
            counts.skip(OVER_CAPACITY)
            return
        peer = _peer(context)
        observer.opened(peer)
        mark = observer.monitor.mark()
        stream = ObservedStream(observer.limits, observer.models)
        done = False  # its record settled (or a bug of ours ended it): later messages change nothing
        try:
            async for message in request_iterator:
                now = observer.clock()
                counts.messages += 1
                counts.last_message_at = now
                if not done:
                    done = not observer.guarded(feed, stream, now, message)
                    if not done and stream.ended:
                        # At once, not when Envoy closes the gRPC stream (its deferred close, seconds later).
                        observer.settle(stream, observer.monitor.since(mark))
                        done = True
                if not message.observability_mode:
                    yield _ANSWERS[message.WhichOneof("request")]()
        finally:
            observer.closed(peer)
            if not done:
                observer.settle(stream, observer.monitor.since(mark))


class TrafficObserver:
    """The ext_proc server ``config`` describes; each finished exchange's record goes to ``sink`` (the
    exporter's own probes' to ``probe_sink``)."""

    def __init__(
        self,
        config: TrafficConfig,
        sink: Sink,
        probe_sink: Sink | None = None,
        limits: StreamLimits | None = None,
        clock: Clock = time.perf_counter,
    ) -> None:
        self.address = config.ext_proc_address
        self.sink = sink
        self.probe_sink = probe_sink
        # The model label's values: the configured ones, or, with none configured, at most
        # ``MAX_MODELS`` that the engine's own GET /v1/models answers list as they pass through Envoy.
        self.models: set[str] = set(config.models)
        self.learn_models = 0 if config.models else MAX_MODELS
        self._most_models = len(self.models) + self.learn_models
        self.limits = limits or StreamLimits()
        self.max_streams = config.max_streams
        self.clock = clock
        self.counts = ObserverCounts()
        self.monitor = (
            LagMonitor()
        )  # real time, whatever stamps the streams; runs only while streams are open
        self._server: grpc.aio.Server | None = None

    async def start(self) -> int:
        """Listen; returns the port (the one chosen for port 0). ``OSError`` when it cannot bind."""
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        pb_grpc.add_ExternalProcessorServicer_to_server(_Servicer(self), server)  # type: ignore[no-untyped-call]
        try:
            port = server.add_insecure_port(self.address)
        except RuntimeError as exc:  # grpcio says "Failed to bind to address ..."
            raise OSError(f"cannot listen on {self.address}: {exc}") from None
        await server.start()
        self._server = server
        return int(port)

    async def stop(self, grace: float = 1.0) -> None:
        """Stop listening; streams in flight get ``grace`` seconds to end."""
        if self._server is not None:
            server, self._server = self._server, None
            await server.stop(grace)

    def guarded(self, step: Callable[..., object], *args: Any) -> bool:
        """Run ``step``; a bug in it is logged with its traceback and counted, and False returned."""
        try:
            step(*args)
        except Exception:
            log.exception("observing a stream failed")
            self.counts.skip(ERROR)
            return False
        return True

    def _learn(self, models: Sequence[str]) -> None:
        for model in models:
            if model not in self.models and len(self.models) >= self._most_models:
                log.warning(
                    "the engine lists more models than %d: the others are labelled other", self.learn_models
                )
                self.learn_models = 0
                return
            self.models.add(model)

    def opened(self, peer: str) -> None:
        """A stream began on Envoy's connection ``peer``."""
        counts = self.counts
        counts.in_flight += 1
        counts.streams += 1
        counts.peers[peer] += 1
        if counts.in_flight == 1:
            self.monitor.start()

    def closed(self, peer: str) -> None:
        counts = self.counts
        counts.in_flight -= 1
        counts.peers[peer] -= 1
        if counts.peers[peer] <= 0:
            del counts.peers[peer]
        if counts.in_flight == 0:
            self.monitor.stop()

    def settle(self, stream: ObservedStream, lag: tuple[float, float] = (0.0, 0.0)) -> None:
        """The exchange is over: its record to its sink, or its reason counted."""
        records: list[Observed | None] = []
        if not self.guarded(lambda: records.append(stream.finish(self.clock(), lag))):
            return
        record = records[0]
        if stream.models_listed and self.learn_models:
            self._learn(stream.models_listed)
        if record is None:
            self.counts.skip((stream.ignored or Ignored.INCOMPLETE).value)
        elif record.probe_id is not None:
            self.counts.ends[StreamEnd.PROBE] += 1
            if self.probe_sink is not None:
                self.guarded(self.probe_sink, record)
        else:
            unreliable = record.result.unreliable
            self.counts.ends[StreamEnd.UNRELIABLE if unreliable else StreamEnd.OBSERVED] += 1
            self.guarded(self.sink, record)
