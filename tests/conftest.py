"""Fixtures for every test package: the built-in simulator on loopback (one configurable fixture) and a
client session.

``sim`` is a ``tiny`` simulator and ``sim_url`` its base URL; a test that needs another config asks for
``start_sim`` and awaits ``start_sim(preset=..., cost=...)`` (``SimConfig``'s fields) as often as it
likes. Every simulator started is stopped after the test.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from exporter.sim import SimConfig, SimServer
from tests.support.sim import StartSim, running_sim


@pytest.fixture
async def start_sim() -> AsyncIterator[StartSim]:
    """Start simulators with ``SimConfig`` fields on 127.0.0.1:0; all are stopped after the test."""
    async with contextlib.AsyncExitStack() as servers:

        async def start(**config: Any) -> SimServer:
            return await servers.enter_async_context(running_sim(SimConfig(**config)))

        yield start


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """One client session per test, with a timeout so that a hang fails instead of blocking."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client:
        yield client


@pytest.fixture
async def sim(start_sim: StartSim) -> SimServer:
    """A ``tiny`` simulator."""
    return await start_sim()


@pytest.fixture
def sim_url(sim: SimServer) -> str:
    """The base URL (``http://127.0.0.1:port``) of a ``tiny`` simulator."""
    return sim.url
