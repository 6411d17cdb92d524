"""Fixtures for the simulator's tests: real servers on loopback port 0, one client session per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from exporter.sim import SimConfig, SimServer

StartSim = Callable[..., Awaitable[SimServer]]


@pytest.fixture
async def start_sim() -> AsyncIterator[StartSim]:
    """Start a ``SimServer`` with config overrides on 127.0.0.1:0; all are stopped after the test."""
    servers: list[SimServer] = []

    async def start(**overrides: Any) -> SimServer:
        server = SimServer(SimConfig(**overrides))
        await server.start("127.0.0.1", 0)
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.stop()


@pytest.fixture
async def sim(start_sim: StartSim) -> SimServer:
    """A ``tiny`` simulator."""
    return await start_sim()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """One client session per test, with a timeout so that a hang fails instead of blocking."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as client:
        yield client
