"""Tests of exporter.engine.scrape over real sockets: the simulator's vLLM page, and every failure."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Iterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from exporter.engine.catalogue import GATEWAY_CATALOGUE, Signal, UnknownEngineError
from exporter.engine.derive import derive
from exporter.engine.scrape import MAX_BODY_BYTES, MAX_REDIRECTS, Page, ScrapeFailure, ScrapeResult, scrape
from exporter.sim import SimServer, tokenizer
from tests.engine import fixtures
from tests.support.hostile import HostileServer

ServerFactory = Callable[[web.Application], Awaitable[TestServer]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serve(aiohttp_server: ServerFactory, handler: Handler) -> str:
    """A one-route server on 127.0.0.1:0; returns the /metrics URL."""
    app = web.Application()
    app.router.add_get("/metrics", handler)
    server = await aiohttp_server(app)
    return str(server.make_url("/metrics"))


async def send(session: aiohttp.ClientSession, sim: SimServer, prompt_tokens: int, max_tokens: int) -> None:
    body = {
        "model": "sim-tiny",
        "prompt": tokenizer.prompt_of_length(prompt_tokens),
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    async with session.post(sim.url + "/v1/completions", json=body) as response:
        assert response.status == 200
        await response.read()


async def test_simulator_page_matches_the_traffic_sent(
    sim: SimServer, session: aiohttp.ClientSession
) -> None:
    url = sim.url + "/metrics"
    before = await scrape(session, Page(url), timeout=5.0)
    assert before.ok and before.snapshot is not None
    assert before.snapshot.kind == "vllm"
    assert before.snapshot.value(Signal.PROMPT_TOKENS_TOTAL) == 0.0

    traffic = [(10, 5), (20, 6), (30, 7)]  # (prompt tokens, output tokens)
    await asyncio.gather(*(send(session, sim, p, n) for p, n in traffic))
    after = await scrape(session, Page(url, model="sim-tiny"), timeout=5.0)
    assert after.failure is None and after.snapshot is not None
    snap = after.snapshot
    assert snap.value(Signal.PROMPT_TOKENS_TOTAL) == 60.0
    assert snap.value(Signal.GENERATION_TOKENS_TOTAL) == 18.0
    assert snap.value(Signal.REQUEST_SUCCESS_TOTAL) == 3.0
    assert snap.value(Signal.RUNNING_REQUESTS) == 0.0
    assert snap.value(Signal.QUEUE_DEPTH) == 0.0
    assert snap.value(Signal.KV_CACHE_USAGE) is not None
    counts = {signal: histogram.count for signal, histogram in snap.histograms.items()}
    assert counts == {
        Signal.SERVER_TTFT_SECONDS: 3.0,
        Signal.SERVER_ITL_SECONDS: 4.0 + 5.0 + 6.0,  # one gap per token after the first
        Signal.SERVER_E2E_SECONDS: 3.0,
        Signal.SERVER_QUEUE_SECONDS: 3.0,
        Signal.SERVER_TPOT_SECONDS: 3.0,  # one per request, not per token
    }
    for histogram in snap.histograms.values():
        assert histogram.buckets[-1][1] == histogram.count

    figures = derive([before.snapshot, snap])
    assert figures.increases[Signal.GENERATION_TOKENS_TOTAL] == 18.0
    ttft_p50 = figures.quantile(Signal.SERVER_TTFT_SECONDS, 0.5)
    assert ttft_p50 is not None and 0.0 < ttft_p50.value < 10.0
    other_model = await scrape(session, Page(url, model="another-model"), timeout=5.0)
    assert other_model.snapshot is not None and other_model.snapshot.values == {}


async def test_snapshot_is_stamped_with_the_injected_clock(
    aiohttp_server: ServerFactory, session: aiohttp.ClientSession
) -> None:
    async def page(_: web.Request) -> web.Response:
        return web.Response(text=fixtures.LLAMACPP)

    ticks: Iterator[float] = iter([100.0, 100.25])
    result = await scrape(session, Page(await serve(aiohttp_server, page)), 5.0, clock=lambda: next(ticks))
    assert result.snapshot is not None
    assert (result.snapshot.at, result.duration_s) == (100.25, 0.25)
    assert result.snapshot.kind == "llamacpp"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_connection_refused_is_connect_error(session: aiohttp.ClientSession) -> None:
    result = await scrape(session, Page(f"http://127.0.0.1:{closed_port()}/metrics"), timeout=5.0)
    assert (result.ok, result.failure) == (False, ScrapeFailure.CONNECT_ERROR)
    assert "ClientConnectorError" in result.detail


async def test_http_500_is_http_status(aiohttp_server: ServerFactory, session: aiohttp.ClientSession) -> None:
    async def broken(_: web.Request) -> web.Response:
        return web.Response(status=500, text="boom")

    result = await scrape(session, Page(await serve(aiohttp_server, broken)), timeout=5.0)
    assert (result.failure, result.detail) == (ScrapeFailure.HTTP_STATUS, "HTTP 500")


@pytest.mark.parametrize(
    ("body", "detail"),
    [
        (b"<html><body>It works!</body></html>", "malformed exposition text"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b"# TYPE up gauge\nup 1\n", "no known engine metrics"),
    ],
)
async def test_unusable_body_is_parse_error(
    aiohttp_server: ServerFactory, session: aiohttp.ClientSession, body: bytes, detail: str
) -> None:
    async def page(_: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/plain")

    result = await scrape(session, Page(await serve(aiohttp_server, page)), 5.0, max_body_bytes=65536)
    assert result.failure is ScrapeFailure.PARSE_ERROR
    assert detail in result.detail


async def test_a_body_over_the_bound_is_too_large(
    aiohttp_server: ServerFactory, session: aiohttp.ClientSession
) -> None:
    async def page(_: web.Request) -> web.Response:
        return web.Response(body=fixtures.VLLM_V1.encode() * 2000, content_type="text/plain")

    result = await scrape(session, Page(await serve(aiohttp_server, page)), 5.0, max_body_bytes=65536)
    assert (result.failure, result.detail) == (ScrapeFailure.TOO_LARGE, "body larger than 65536 bytes")


@pytest.mark.parametrize(
    ("mode", "detail"),
    [
        ("huge_body", f"body larger than {MAX_BODY_BYTES} bytes"),
        ("endless_headers", "Too many headers received"),
        ("endless_header", "Got more than 8190 bytes"),
    ],
)
async def test_an_endless_page_or_head_is_too_large_not_a_timeout(
    session: aiohttp.ClientSession, mode: str, detail: str
) -> None:
    """Ended by a bound (the body's, or aiohttp's on the head), long before the scrape's deadline."""
    async with HostileServer(mode) as server:
        result = await scrape(session, Page(server.url + "/metrics"), timeout=60.0)
    assert result.failure is ScrapeFailure.TOO_LARGE
    assert detail in result.detail and len(result.detail) < 200  # not the header's bytes


async def test_a_redirect_is_followed_on_the_same_host_only(
    aiohttp_server: ServerFactory, session: aiohttp.ClientSession
) -> None:
    """A bearer token for the engine's /metrics must not go to another host, nor its page stand in for
    the engine's; a prometheus_client app mounted at /metrics answers 307 to /metrics/."""

    async def moved(_: web.Request) -> web.Response:
        raise web.HTTPTemporaryRedirect("/metrics/")

    async def page(request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == "Bearer engine-token"
        return web.Response(text=fixtures.LLAMACPP)

    app = web.Application()
    app.router.add_get("/metrics", moved)
    app.router.add_get("/metrics/", page)
    same = str((await aiohttp_server(app)).make_url("/metrics"))
    headers = {"Authorization": "Bearer engine-token"}
    assert (await scrape(session, Page(same, headers=headers), 5.0)).ok

    async with HostileServer("redirect") as other:  # counts what it is asked
        # localhost is another host than 127.0.0.1 for a URL's origin, though the same machine.
        away = HostileServer("redirect", location=other.url.replace("127.0.0.1", "localhost") + "/metrics")
        async with away:
            result = await scrape(session, Page(away.url + "/metrics", headers=headers), 5.0)
    assert result.failure is ScrapeFailure.HTTP_STATUS
    assert (
        result.detail
        == f"HTTP 302 to another host (http://localhost:{other.url.rsplit(':', 1)[1]}), not followed"
    )
    assert other.requests == []


async def test_a_redirect_loop_ends_after_a_few(session: aiohttp.ClientSession) -> None:
    async with HostileServer("redirect") as server:
        server.location = server.url + "/metrics"
        result = await scrape(session, Page(server.url + "/metrics"), 5.0)
    assert (result.failure, result.detail) == (
        ScrapeFailure.HTTP_STATUS,
        f"more than {MAX_REDIRECTS} redirects",
    )
    assert len(server.requests) == MAX_REDIRECTS + 1


async def test_stalled_server_is_timeout_and_cancellation_propagates(
    aiohttp_server: ServerFactory, session: aiohttp.ClientSession
) -> None:
    release, asked = asyncio.Event(), asyncio.Event()

    async def stalled(_: web.Request) -> web.Response:
        asked.set()
        await release.wait()
        return web.Response(text=fixtures.LLAMACPP)

    url = await serve(aiohttp_server, stalled)
    try:
        result = await scrape(session, Page(url), timeout=0.2)
        assert result.failure is ScrapeFailure.TIMEOUT
        assert result.detail == "no complete answer within 0.2 s"
        assert 0.15 < result.duration_s < 5.0

        asked.clear()
        task = asyncio.create_task(scrape(session, Page(url), timeout=30.0))
        await asyncio.wait_for(asked.wait(), 5)  # the scrape is waiting for its answer
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        release.set()


async def test_headers_are_sent_and_a_gateway_page_is_read_with_its_catalogue(
    aiohttp_server: ServerFactory, session: aiohttp.ClientSession
) -> None:
    async def guarded(request: web.Request) -> web.Response:
        if request.headers.get("Authorization") != "Bearer k8s-token":
            return web.Response(status=401)
        return web.Response(text=fixtures.LLM_D_EPP)

    url = await serve(aiohttp_server, guarded)
    refused = await scrape(session, Page(url, catalogue=GATEWAY_CATALOGUE), timeout=5.0)
    assert (refused.failure, refused.detail) == (ScrapeFailure.HTTP_STATUS, "HTTP 401")
    headers = {"Authorization": "Bearer k8s-token"}
    result = await scrape(session, Page(url, catalogue=GATEWAY_CATALOGUE, headers=headers), timeout=5.0)
    assert result.snapshot is not None and result.snapshot.kind == "llm-d-epp"
    assert result.snapshot.value(Signal.REQUESTS_TOTAL) == 100.0
    with pytest.raises(UnknownEngineError, match='unknown gateway kind "vllm"'):
        await scrape(session, Page(url, kind="vllm", catalogue=GATEWAY_CATALOGUE), timeout=5.0)


async def test_misspelt_kind_raises_before_any_io(session: aiohttp.ClientSession) -> None:
    with pytest.raises(UnknownEngineError, match='unknown engine kind "vlm"; valid: auto, llamacpp'):
        await scrape(session, Page(f"http://127.0.0.1:{closed_port()}/metrics", kind="vlm"), 1.0)


def test_scrape_result_ok_property() -> None:
    assert not ScrapeResult(None, ScrapeFailure.TIMEOUT, "x", 1.0).ok
