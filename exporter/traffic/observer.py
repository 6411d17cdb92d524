"""The observer: a gRPC ``ExternalProcessor`` server (grpcio's asyncio API) that Envoy's ``ext_proc``
filter streams each HTTP exchange to, one ``Process`` stream per request.

The handler stamps each message with the injected clock (``time.perf_counter``) the moment it has it and
hands it to the exchange's ``ObservedStream``; decoding and every figure happen there and after. In
observability mode Envoy ignores answers and the protocol says to send none; a message sent without it
(a filter configured to wait) gets the empty answer that lets the exchange continue unchanged, so a
misconfigured Envoy is slowed, never broken. Streams past ``max_streams`` are closed at once (Envoy goes
on without the observer) and counted; a bug in decoding is logged with its traceback and counted, and
ends only that stream's record.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import grpc

from exporter.traffic._proto.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from exporter.traffic._proto.envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from exporter.traffic.record import ERROR, OVER_CAPACITY, Ignored, Observed, ObservedStream, StreamLimits

log = logging.getLogger(__name__)

Clock = Callable[[], float]
Sink = Callable[[Observed], None]
DEFAULT_MAX_STREAMS = 1024
# The empty answer to each kind of message, for a filter that waits for one (not observability mode).
_ANSWERS: dict[str, Callable[[], pb.ProcessingResponse]] = {
    "request_headers": lambda: pb.ProcessingResponse(request_headers=pb.HeadersResponse()),
    "response_headers": lambda: pb.ProcessingResponse(response_headers=pb.HeadersResponse()),
    "request_body": lambda: pb.ProcessingResponse(request_body=pb.BodyResponse()),
    "response_body": lambda: pb.ProcessingResponse(response_body=pb.BodyResponse()),
    "request_trailers": lambda: pb.ProcessingResponse(request_trailers=pb.TrailersResponse()),
    "response_trailers": lambda: pb.ProcessingResponse(response_trailers=pb.TrailersResponse()),
}


@dataclass
class ObserverCounts:
    """What the observer saw besides records: streams open now, and streams without a record by reason
    (``record.SKIP_REASONS``)."""

    in_flight: int = 0
    streams: int = 0
    messages: int = 0  # every message Envoy sent on an observed stream
    skipped: Counter[str] = field(default_factory=Counter)


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


class _Servicer(pb_grpc.ExternalProcessorServicer):
    def __init__(self, observer: TrafficObserver) -> None:
        self._observer = observer

    async def Process(  # noqa: N802 (the gRPC method's name)
        self, request_iterator: AsyncIterator[pb.ProcessingRequest], context: Any
    ) -> AsyncIterator[pb.ProcessingResponse]:
        observer, counts = self._observer, self._observer.counts
        if counts.in_flight >= observer.max_streams:
            counts.skipped[OVER_CAPACITY] += 1
            return
        counts.in_flight += 1
        counts.streams += 1
        stream = ObservedStream(observer.limits, observer.models)
        broken = False
        try:
            async for message in request_iterator:
                now = observer.clock()
                counts.messages += 1
                if not broken:
                    broken = not observer.guarded(feed, stream, now, message)
                if not message.observability_mode:
                    yield _ANSWERS[message.WhichOneof("request")]()
        finally:
            counts.in_flight -= 1
            if not broken:
                observer.settle(stream)


class TrafficObserver:
    """The ext_proc server on ``address`` (HOST:PORT); each finished exchange's record goes to ``sink``."""

    def __init__(
        self,
        address: str,
        sink: Sink,
        *,
        models: frozenset[str] = frozenset(),
        limits: StreamLimits | None = None,
        max_streams: int = DEFAULT_MAX_STREAMS,
        clock: Clock = time.perf_counter,
    ) -> None:
        self.address = address
        self.sink = sink
        self.models = models
        self.limits = limits or StreamLimits()
        self.max_streams = max_streams
        self.clock = clock
        self.counts = ObserverCounts()
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
            self.counts.skipped[ERROR] += 1
            return False
        return True

    def settle(self, stream: ObservedStream) -> None:
        """The exchange is over: its record to the sink, or its reason counted."""
        records: list[Observed | None] = []
        if not self.guarded(lambda: records.append(stream.finish(self.clock()))):
            return
        if records[0] is not None:
            self.guarded(self.sink, records[0])
        elif stream.ignored is not None:
            self.counts.skipped[stream.ignored.value] += 1
        else:
            self.counts.skipped[Ignored.INCOMPLETE.value] += 1
