"""The ``capacity`` command's drain before a trial: the engine's own counts from ``/metrics`` at the
target's origin, or the settling pause for a target that serves none, asked once."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web

from exporter.jobs.local_capacity import engine_counts
from exporter.sim import SimServer
from tests.support.net import serving_app

CHAT = {
    "messages": [{"role": "user", "content": "hello"}],
    "max_tokens": 4000,
    "stream": True,
    "ignore_eos": True,
}


async def test_the_engine_s_running_requests_are_read_from_its_metrics(sim: SimServer) -> None:
    async with engine_counts(sim.url + "/v1") as busy:  # the origin's /metrics, whatever the path
        assert await busy() == 0
        async with contextlib.AsyncExitStack() as stack:
            session = await stack.enter_async_context(aiohttp.ClientSession())
            body = {**CHAT, "model": sim.model}
            response = await stack.enter_async_context(
                session.post(f"{sim.url}/v1/chat/completions", json=body)
            )
            assert response.status == 200
            await response.content.readline()  # streaming: the engine holds it
            async with asyncio.timeout(10):
                while await busy() != 1:
                    await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def without_metrics() -> AsyncIterator[tuple[str, list[str]]]:
    """A server whose /metrics is a 404 (llama.cpp without ``--metrics``); yields its URL and the
    paths asked."""
    asked: list[str] = []

    async def not_found(request: web.Request) -> web.Response:
        asked.append(request.path)
        return web.Response(status=404)

    app = web.Application()
    app.router.add_get("/metrics", not_found)
    async with serving_app(app) as url:
        yield url, asked


async def test_a_target_without_engine_metrics_is_asked_once_then_left_to_the_pause() -> None:
    async with without_metrics() as (url, asked), engine_counts(url) as busy:
        assert [await busy() for _ in range(3)] == [None, None, None]
        assert asked == ["/metrics"]
