"""Fixtures for the jobs tests: the slowed simulator the live jobs tests drive."""

from __future__ import annotations

import pytest

from exporter.sim import SimServer
from tests.jobs.live import SLOW_SIM
from tests.support.sim import StartSim


@pytest.fixture
async def slow_sim(start_sim: StartSim) -> SimServer:
    """The ``tiny`` simulator slowed to an 8B model's pace on one GPU (``tests.jobs.live``)."""
    return await start_sim(**SLOW_SIM)
