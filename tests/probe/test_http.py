"""The raw-protocol HTTP/1.1 client: framings, keep-alive, splits at any byte, and deferred decoding.

Servers here are plain ``asyncio.start_server`` handlers on 127.0.0.1:0 that write exact bytes, so each
framing (chunked, Content-Length, close-delimited, HTTP/1.0) and each split of the bytes across reads is
what the test says it is."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.probe.client import ProbeClient
from exporter.probe.http import Endpoint, request_bytes
from exporter.probe.stream_reader import StreamReader
from exporter.settings.target import TargetSettings
from exporter.streams.decoder import StreamState
from exporter.streams.openai import FORMATS
from exporter.streams.request import RequestSpec, Timeouts
from exporter.streams.result import Outcome, ProbeResult
from exporter.streams.tokens import TokenCounter

FAST = Timeouts(connect=1.0, ttft=2.0, idle=2.0, total=5.0)
SPEC = RequestSpec(prompt="hi", max_tokens=3)


def sse_body(texts: list[str], usage: int | None = None) -> bytes:
    events = [{"choices": [{"text": t, "finish_reason": None}]} for t in texts]
    events.append({"choices": [{"text": "", "finish_reason": "length"}]})
    if usage is not None:
        events.append({"choices": [], "usage": {"completion_tokens": usage, "prompt_tokens": 1}})
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


BODY = sse_body([" a", " b", " c"], usage=3)
SSE_HEAD = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    return head + await reader.readexactly(length)


@contextlib.asynccontextmanager
async def client_for(handler: Handler, host: str = "127.0.0.1") -> AsyncIterator[ProbeClient]:
    server = await asyncio.start_server(handler, host, 0)
    port = server.sockets[0].getsockname()[1]
    url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    try:
        async with ProbeClient(
            TargetSettings(base_url=url, api="completions", model="m", timeouts=FAST)
        ) as client:
            yield client
    finally:
        server.close()
        await server.wait_closed()


def answering(response: bytes, *, close: bool = False, requests: list[bytes] | None = None) -> Handler:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                request = await read_request(reader)
                if requests is not None:
                    requests.append(request)
                writer.write(response)
                await writer.drain()
                if close:
                    break
        writer.close()

    return handle


def chunked(body: bytes, size: int = 40) -> bytes:
    pieces = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


@pytest.mark.parametrize(
    ("name", "response", "close"),
    [
        ("chunked", (SSE_HEAD + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunked(BODY), False),
        ("content-length", (SSE_HEAD + f"Content-Length: {len(BODY)}\r\n\r\n").encode() + BODY, False),
        ("close-delimited", (SSE_HEAD + "Connection: close\r\n\r\n").encode() + BODY, True),
        ("http/1.0", (SSE_HEAD.replace("1.1", "1.0") + "\r\n").encode() + BODY, True),
    ],
)
async def test_every_framing_gives_the_same_result(name: str, response: bytes, close: bool) -> None:
    async with client_for(answering(response, close=close)) as client:
        first = await client.send(SPEC)
        second = await client.send(SPEC)
    for result in (first, second):
        assert result.outcome is Outcome.OK, (name, result.error)
        assert (result.output_tokens, result.completion_tokens_reported, result.retries) == (3, 3, 0)


async def test_keep_alive_reuses_one_connection_and_close_does_not() -> None:
    connections = 0
    response = (SSE_HEAD + "Transfer-Encoding: chunked\r\n\r\n").encode() + chunked(BODY)
    inner = answering(response)

    async def counting(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await inner(reader, writer)

    async with client_for(counting) as client:
        for _ in range(4):
            assert (await client.send(SPEC)).ok
    assert connections == 1


async def test_request_bytes_carry_host_length_and_headers_and_ipv6_hosts_are_bracketed() -> None:
    requests: list[bytes] = []
    response = (SSE_HEAD + f"Content-Length: {len(BODY)}\r\n\r\n").encode() + BODY
    try:
        async with client_for(answering(response, requests=requests), host="::1") as client:
            assert (await client.send(SPEC)).ok
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    head, _, body = requests[0].partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    assert lines[0] == "POST /v1/completions HTTP/1.1"
    assert any(line.startswith("Host: [::1]:") for line in lines)
    assert f"Content-Length: {len(body)}" in lines
    assert json.loads(body)["stream"] is True


def test_endpoint_keeps_the_base_path_and_default_ports() -> None:
    endpoint = Endpoint.parse("https://gw.example/proxy/v1/")
    assert (endpoint.host, endpoint.port, endpoint.tls, endpoint.path) == (
        "gw.example",
        443,
        True,
        "/proxy/v1",
    )
    assert endpoint.host_header == "gw.example"
    assert request_bytes("GET", endpoint, "/models", []).startswith(b"GET /proxy/v1/models HTTP/1.1\r\n")
    with pytest.raises(ValueError, match="http:// or https://"):
        Endpoint.parse("ftp://host")


@pytest.mark.parametrize(
    ("response", "outcome"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", Outcome.CONNECT_ERROR),
        ((SSE_HEAD + "Transfer-Encoding: chunked\r\n\r\n").encode() + b"zz\r\n", Outcome.STREAM_ABORTED),
        (b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n", Outcome.HTTP_STATUS),
    ],
)
async def test_broken_http_is_an_outcome_not_an_exception(response: bytes, outcome: Outcome) -> None:
    async with client_for(answering(response, close=True)) as client:
        result = await client.send(SPEC)
    assert result.outcome is outcome, result.error


# -- deferred decoding is exact -------------------------------------------------------------------


async def read_in_pieces(body: bytes, cuts: list[int], *, defer: bool) -> ProbeResult:
    """Feed ``body`` to a ``StreamReader`` split at ``cuts`` (stamps 1, 2, ...), as the connection would."""
    result = ProbeResult(api="completions", max_tokens=3)
    state = StreamState(result, FORMATS["completions"], TokenCounter(None))
    reader = StreamReader(state, 1 << 20)
    reader.on_headers(0.5, 200, {"content-type": "text/event-stream"})
    bounds = [0, *sorted(set(cuts)), len(body)]
    for stamp, (start, end) in enumerate(itertools.pairwise(bounds), start=1):
        if end > start:
            reader.on_read(float(stamp), body[start:end])
            if not defer and reader._kept is not None:
                reader._flush()  # decode on arrival, as before the first token
    reader.on_end(float(len(bounds)), None)
    await reader.finished
    assert reader.failure is None
    state.finish(exact_length=False)
    return result


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(BODY) - 1), max_size=25))
async def test_decoding_at_the_end_equals_decoding_on_arrival(cuts: list[int]) -> None:
    deferred = await read_in_pieces(BODY, cuts, defer=True)
    eager = await read_in_pieces(BODY, cuts, defer=False)
    assert deferred.token_times == eager.token_times
    assert deferred.token_counts == eager.token_counts
    assert (deferred.multi_event_reads, deferred.finished_at) == (eager.multi_event_reads, eager.finished_at)
    assert deferred.outcome is Outcome.OK and deferred.output_tokens == 3
