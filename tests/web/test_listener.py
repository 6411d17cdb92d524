"""The daemon's listener on loopback: a cap on connections (the one over it answered 503), idle and
half-sent connections closed after the keep-alive, and ``/metrics`` rendered at most once per max age."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from exporter.web.listener import CappedSockSite, runner_options
from exporter.web.metrics_cache import MetricsCache

KEEPALIVE_S = 0.5  # the tests' keep-alive, kept short so they wait little


@contextlib.asynccontextmanager
async def capped(max_connections: int) -> AsyncIterator[tuple[str, int]]:
    """A plain app served through ``CappedSockSite`` with the daemon's runner options; yields its address."""

    async def hello(_: web.Request) -> web.Response:
        return web.Response(text="hello\n")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app, **runner_options(KEEPALIVE_S))
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    await CappedSockSite(runner, sock, max_connections=max_connections).start()
    try:
        yield "127.0.0.1", sock.getsockname()[1]
    finally:
        await runner.cleanup()
        sock.close()


async def status_of_get(host: str, port: int) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    await writer.drain()
    line = await asyncio.wait_for(reader.readline(), 5)
    writer.close()
    return int(line.split()[1])


@pytest.mark.timeout(20)
async def test_a_connection_over_the_cap_is_answered_503_and_one_under_it_is_served() -> None:
    async with capped(max_connections=3) as (host, port):
        idle = [await asyncio.open_connection(host, port) for _ in range(3)]
        await asyncio.sleep(0.05)  # accepted by the loop
        assert await status_of_get(host, port) == 503
        for _, writer in idle:
            writer.close()
        await asyncio.sleep(0.1)  # their close seen by the server
        assert await status_of_get(host, port) == 200


@pytest.mark.timeout(20)
@pytest.mark.parametrize("sent", [b"", b"GET / HTTP/1.1\r\nHost: x\r\n"], ids=["idle", "half-sent headers"])
async def test_a_connection_that_sends_no_whole_request_is_closed_after_the_keep_alive(sent: bytes) -> None:
    async with capped(max_connections=10) as (host, port):
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(sent)
        started = time.monotonic()
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the server (aiohttp's: 3,630 s)
        assert time.monotonic() - started < KEEPALIVE_S + 2.0
        writer.close()


def test_metrics_are_rendered_once_per_max_age_however_often_asked() -> None:
    now = [0.0]
    renders: list[float] = []

    def render() -> bytes:
        renders.append(now[0])
        return f"rendered at {now[0]}\n".encode()

    cache = MetricsCache(render, max_age_s=1.0, clock=lambda: now[0])
    for step in range(25):  # 2.5 s of scrapes every 0.1 s, plain and gzipped
        now[0] = step / 10
        assert cache.body(gzipped=False).startswith(b"rendered at")
        assert cache.body(gzipped=True)[:2] == b"\x1f\x8b"
    assert renders == [0.0, 1.0, 2.0]


def test_a_max_age_of_zero_renders_every_scrape() -> None:
    count = [0]

    def render() -> bytes:
        count[0] += 1
        return b"x\n"

    cache = MetricsCache(render, max_age_s=0.0, clock=lambda: 5.0)
    for _ in range(3):
        cache.body(gzipped=False)
    assert count[0] == 3
