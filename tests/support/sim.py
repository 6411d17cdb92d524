"""The built-in simulator on a free loopback port, stopped when the block (or the test) ends."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable
from typing import Any, Protocol

from exporter.sim import SimConfig, SimServer


class StartSim(Protocol):
    """The ``start_sim`` fixture: ``await start_sim(preset=..., cost=...)`` takes ``SimConfig``'s fields."""

    def __call__(self, **config: Any) -> Awaitable[SimServer]: ...


@contextlib.asynccontextmanager
async def running_sim(config: SimConfig | None = None) -> AsyncIterator[SimServer]:
    """A ``SimServer`` (``tiny`` unless told otherwise) serving on 127.0.0.1, any free port."""
    server = SimServer(config or SimConfig())
    await server.start("127.0.0.1", 0)
    try:
        yield server
    finally:
        await server.stop()
