"""The daemon's listener: how many connections it holds, and for how long an idle one stays open.

aiohttp holds an idle keep-alive connection for 3,630 s and takes every connection offered: 20,000 idle
connections were all held, each a file descriptor and a protocol object. Here a connection that has not
sent a whole request's headers within ``KEEPALIVE_S`` of opening, or of its last answer, is closed
(aiohttp's keep-alive timer is also its only header-read timeout: it closes a connection whose request
has not fully arrived), and past ``MAX_CONNECTIONS`` a new connection is answered 503 and closed at once.
Prometheus scrapes every 15 s or more and reconnects at no cost on loopback or in a cluster.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from aiohttp import web

KEEPALIVE_S = 5.0  # an idle connection, or one whose headers are still coming, closes after this
MAX_CONNECTIONS = 512  # open at once; beyond, answered 503 (half the usual 1,024 descriptors)
MAX_LINE_BYTES = 8190  # a request or header line, as aiohttp's default: said here as a bound we hold
MAX_FIELD_BYTES = 8190
REFUSAL = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nConnection: close\r\n"
    b"Content-Length: 49\r\n\r\ntoo many connections to the exporter; retry later\n"
)


def runner_options(keepalive_s: float = KEEPALIVE_S) -> dict[str, Any]:
    """The ``web.AppRunner`` keywords that bound each connection's idle time and header lines."""
    return {
        "keepalive_timeout": keepalive_s,
        "max_line_size": MAX_LINE_BYTES,
        "max_field_size": MAX_FIELD_BYTES,
    }


class _Refused(asyncio.Protocol):
    """A connection over the cap: told so and closed, without reading what it sends."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(REFUSAL)
        transport.close()


class CappedSockSite(web.SockSite):
    """A ``web.SockSite`` that holds at most ``max_connections`` connections at once."""

    def __init__(
        self, runner: web.BaseRunner, sock: socket.socket, *, max_connections: int = MAX_CONNECTIONS
    ):
        super().__init__(runner, sock)
        self._max_connections = max_connections

    async def start(self) -> None:
        # As web.SockSite.start, with the cap between the socket and aiohttp's protocol factory.
        await web.BaseSite.start(self)  # registers the site with the runner
        handlers = self._runner.server
        assert handlers is not None

        def protocol() -> asyncio.Protocol:
            if len(handlers.connections) >= self._max_connections:
                return _Refused()
            return handlers()

        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(protocol, sock=self._sock, backlog=self._backlog)
