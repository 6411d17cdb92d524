"""Helpers for the probe's tests: settings for a simulator, the simulator's request extensions, the
wall clock's offset from the monotonic clock, and a stamped socket on loopback that records its reads."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Iterator
from typing import Any

from exporter.probe.socket_reads import OFFSET_BRACKET_S, SO_TIMESTAMPNS, SocketReads
from exporter.probe.stamped import StampedSocket
from exporter.settings.target import TargetSettings
from exporter.sim import SimServer
from exporter.streams.request import Timeouts

# Short limits so that a hung test fails in seconds, not minutes.
TEST_TIMEOUTS = Timeouts(connect=2.0, ttft=5.0, idle=5.0, total=15.0)


def settings_for(server: SimServer, **overrides: Any) -> TargetSettings:
    """Settings pointing at ``server`` (model resolved through /v1/models unless given)."""
    fields: dict[str, Any] = {"base_url": server.url, "timeouts": TEST_TIMEOUTS, **overrides}
    return TargetSettings(**fields)


def script(**fields: Any) -> tuple[tuple[str, Any], ...]:
    """A request's ``extra_body`` that makes the simulator play ``fields`` as its timing script."""
    return (("sim", {"script": fields}),)


def fault(spec: Any) -> tuple[tuple[str, Any], ...]:
    """A request's ``extra_body`` that makes the simulator inject ``spec``."""
    return (("sim", {"fault": spec}),)


def wall_offset() -> float:
    """The wall clock minus the monotonic clock, from a wall-clock read between two monotonic reads close
    together (as ``SocketReads.clocks`` takes it): a preemption in between would shift the stamps."""
    for _ in range(10_000):
        before, wall, after = time.perf_counter(), time.time(), time.perf_counter()
        if after - before <= OFFSET_BRACKET_S:
            return wall - (before + after) / 2
    raise AssertionError("no clean clock reading in 10,000 tries")


class RecordingProtocol:
    """A stamped socket's protocol that records each read as (stamp, bytes)."""

    def __init__(self) -> None:
        self.reads: list[tuple[float, bytes]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        pass

    def received(self, now: float, data: bytes) -> None:
        self.reads.append((now, data))

    def connection_lost(self, exc: Exception | None) -> None:
        pass


@contextlib.contextmanager
def stamped_pair(reads: SocketReads) -> Iterator[tuple[StampedSocket, socket.socket, RecordingProtocol]]:
    """A loopback TCP connection: the client's end a stamped socket of ``reads`` (not started), whose
    reads ``RecordingProtocol`` records; the server's end a plain blocking socket."""
    assert SO_TIMESTAMPNS is not None
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        server, _ = listener.accept()
    client.setblocking(False)
    client.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    protocol = RecordingProtocol()
    stamped = StampedSocket(client, protocol, reads)
    with server:
        try:
            yield stamped, server, protocol
        finally:
            stamped.close()
