"""Loopback helpers shared by the tests that start servers."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def serving_app(app: web.Application, **runner_options: Any) -> AsyncIterator[str]:
    """``app`` served on 127.0.0.1, any free port; yields its base URL and cleans up after the block."""
    runner = web.AppRunner(app, **runner_options)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


async def raw_status(host: str, port: int, path: str, authorization: bytes) -> int:
    """The status answered to ``GET path`` whose Authorization header is raw bytes (maybe not UTF-8)."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".encode()
        + b"Authorization: "
        + authorization
        + b"\r\n\r\n"
    )
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    await writer.wait_closed()
    return int(status_line.split()[1])
