"""A stand-in for llm-d's endpoint picker (the Gateway API inference extension's EPP): an HTTP server
on a free loopback port whose ``/metrics`` is the ``LLM_D_EPP`` fixture, every value multiplied by the
number of scrapes so far, so counters and histograms grow by the fixture's amounts on every scrape and
any window's quantile is the fixture's own."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from aiohttp import web

from tests.engine import fixtures
from tests.support.net import serving_app


def grown(text: str, factor: float) -> str:
    """An exposition page with every sample value multiplied by ``factor``."""
    lines = []
    for line in text.splitlines():
        head, _, number = line.rpartition(" ")
        sample = line and not line.startswith("#")
        lines.append(f"{head} {float(number) * factor:g}" if sample else line)
    return "\n".join(lines) + "\n"


@contextlib.asynccontextmanager
async def fake_gateway() -> AsyncIterator[str]:
    """The stand-in running; yields its base URL (``/metrics`` under it)."""
    scrapes = 0

    async def metrics(_: web.Request) -> web.Response:
        nonlocal scrapes
        scrapes += 1
        return web.Response(text=grown(fixtures.LLM_D_EPP, scrapes), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    async with serving_app(app) as url:
        yield url
