"""The observer's gRPC server, spoken to by a real grpcio client on loopback as Envoy speaks to it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import grpc
import pytest

from exporter.settings.traffic import TrafficConfig
from exporter.streams.result import Outcome
from exporter.traffic._proto.envoy.config.core.v3 import base_pb2
from exporter.traffic._proto.envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from exporter.traffic._proto.envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from exporter.traffic.observer import TrafficObserver
from exporter.traffic.record import Observed
from tests.support.wait import wait_for

pytestmark = pytest.mark.timeout(30)
BODY = json.dumps({"model": "m", "stream": True, "max_tokens": 2}).encode()
CHUNK = b'data: {"choices":[{"index":0,"text":"x"}]}\n\n'


def headers(pairs: dict[str, str], end: bool = False) -> pb.HttpHeaders:
    values = [base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
    return pb.HttpHeaders(headers=base_pb2.HeaderMap(headers=values), end_of_stream=end)


def exchange(observability: bool = True) -> Iterator[pb.ProcessingRequest]:
    mode = {"observability_mode": observability}
    yield pb.ProcessingRequest(
        request_headers=headers({":method": "POST", ":path": "/v1/completions"}), **mode
    )
    yield pb.ProcessingRequest(request_body=pb.HttpBody(body=BODY, end_of_stream=True), **mode)
    yield pb.ProcessingRequest(
        response_headers=headers({":status": "200", "content-type": "text/event-stream"}), **mode
    )
    for _ in range(2):
        yield pb.ProcessingRequest(response_body=pb.HttpBody(body=CHUNK), **mode)
    yield pb.ProcessingRequest(
        response_body=pb.HttpBody(body=b"data: [DONE]\n\n", end_of_stream=True), **mode
    )


@dataclass
class Harness:
    observer: TrafficObserver
    records: list[Observed]
    stub: pb_grpc.ExternalProcessorStub


@pytest.fixture
async def observed() -> AsyncIterator[Harness]:
    """An observer on a free loopback port whose clock ticks once per stamp, and a client stub."""
    records: list[Observed] = []
    ticks = iter(range(1000))
    observer = TrafficObserver(
        TrafficConfig("127.0.0.1:0", models=("m",)), records.append, clock=lambda: float(next(ticks))
    )
    port = await observer.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield Harness(observer, records, pb_grpc.ExternalProcessorStub(channel))
    await observer.stop()


async def answers(stub: pb_grpc.ExternalProcessorStub, messages: Iterator[pb.ProcessingRequest]) -> list[str]:
    return [reply.WhichOneof("response") async for reply in stub.Process(messages)]


async def test_each_message_is_stamped_with_the_clock_as_it_comes(observed: Harness) -> None:
    records, stub = observed.records, observed.stub
    assert await answers(stub, exchange()) == []  # observability mode: no answer, as the protocol says
    [record] = records
    result = record.result
    assert (record.model, result.api, result.outcome) == ("m", "completions", Outcome.OK)
    assert result.sent_at == 1.0 and result.headers_at == 2.0  # the request's end, the response's start
    assert result.token_times == [3.0, 4.0] and result.finished_at == 5.0


async def test_a_waiting_filter_gets_an_empty_answer_to_each_message(observed: Harness) -> None:
    records, stub = observed.records, observed.stub
    replies = await answers(stub, exchange(observability=False))
    assert replies == ["request_headers", "request_body", "response_headers"] + ["response_body"] * 3
    assert len(records) == 1


async def test_streams_past_the_cap_are_closed_and_counted(observed: Harness) -> None:
    observer, records, stub = observed.observer, observed.records, observed.stub
    observer.max_streams = 0
    replies: list[str] = []
    # Closed at once, unanswered (Envoy goes on alone); a client still sending then sees an error.
    with contextlib.suppress(grpc.aio.AioRpcError):
        replies = await answers(stub, exchange(observability=False))
    assert replies == []
    assert observer.counts.skipped["over_capacity"] == 1 and records == []


async def test_a_bug_in_the_sink_is_logged_and_counted(
    observed: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    observer, stub = observed.observer, observed.stub

    def broken(record: Observed) -> None:
        raise RuntimeError("a bug")

    observer.sink = broken
    await answers(stub, exchange())
    assert observer.counts.skipped["error"] == 1
    assert "observing a stream failed" in caplog.text
    assert observer.counts.in_flight == 0


async def test_a_port_in_use_is_a_clear_error() -> None:
    first = TrafficObserver(TrafficConfig("127.0.0.1:0"), lambda record: None)
    port = await first.start()
    try:
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}"):
            await TrafficObserver(TrafficConfig(f"127.0.0.1:{port}"), lambda record: None).start()
    finally:
        await first.stop()


async def test_a_record_is_settled_when_the_body_ends_not_when_envoy_closes(observed: Harness) -> None:
    records, stub, counts = observed.records, observed.stub, observed.observer.counts

    async def held_open() -> AsyncIterator[pb.ProcessingRequest]:
        for message in exchange():
            yield message
        # Envoy's deferred close keeps the gRPC stream open seconds longer: the record is out already.
        await wait_for(lambda: len(records) == 1, timeout=10)
        assert counts.in_flight == 1 and counts.ends["observed"] == 1

    assert [reply async for reply in stub.Process(held_open())] == []
    assert len(records) == 1 and counts.in_flight == 0
