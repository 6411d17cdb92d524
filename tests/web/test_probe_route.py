"""``/probe`` over a real server on loopback: a pair of names the config does not put together is
checked as the config checks its own pairs, so a pair the target cannot send is a 400, not a 500."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from exporter.app import Daemon, web_app
from exporter.settings.parse import load_config


def _closed_port() -> int:
    with socket.socket() as sock:  # a port nobody listens on: scheduled probes fail fast
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    """A completions target probing a plain module, and a chat target probing one with tool calls."""
    url = f"http://127.0.0.1:{_closed_port()}"
    config = load_config(
        "targets:\n"
        f"  - {{name: comp, url: '{url}', api: completions, simulated: true, modules: [plain]}}\n"
        f"  - {{name: chat, url: '{url}', simulated: true, modules: [tools]}}\n"
        "modules:\n"
        "  plain: {workload: {prompt_tokens: 'fixed:16', output_tokens: 'fixed:4'}, schedule: {interval: 1h}}\n"
        "  tools:\n"
        "    workload: {prompt_tokens: 'fixed:16', output_tokens: 'fixed:4', tool_calls: true}\n"
        "    schedule: {interval: 1h}\n"
    )
    runner = web.AppRunner(web_app(Daemon(config)))
    await runner.setup()  # starts the daemon
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    finally:
        await runner.cleanup()  # stops the daemon


async def test_a_pair_the_target_cannot_send_is_a_bad_request(base_url: str) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{base_url}/probe?target=comp&module=tools") as response,
    ):
        assert response.status == 400
        assert await response.text() == (
            'target "comp" cannot probe module "tools": tool calls need api chat or responses, '
            "not completions; change one of them\n"
        )
