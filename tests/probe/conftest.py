"""Fixtures for the probe's tests: a real simulator on 127.0.0.1:0."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from exporter.sim import SimConfig, SimServer


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    """A ``tiny`` simulator serving on loopback."""
    server = SimServer(SimConfig(preset="tiny"))
    await server.start("127.0.0.1", 0)
    yield server
    await server.stop()
