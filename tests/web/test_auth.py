"""The bearer check of ``/probe`` and the jobs API: one check (``Secret.matches_bearer``), over real servers
on loopback.

Both routes once had their own check: ``/probe`` matched the scheme case-sensitively and answered 500 to
a header of undecodable bytes. Now both accept any case of "Bearer" (RFC 7235) and answer 401 to odd bytes.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from exporter.app import Daemon, web_app
from exporter.settings.parse import load_config
from exporter.streams.request import Secret
from tests.support.net import raw_status

TOKEN = "t0ken-\u00e9"  # a non-ASCII token: the compare works on bytes of any text
ENV = {"PROBE_TOKEN": TOKEN, "JOBS_TOKEN": TOKEN}
PROBE = "/probe?target=t&module=m"
JOBS = "/api/v1/jobs"


@pytest.mark.parametrize(
    ("header", "matches"),
    [
        (f"Bearer {TOKEN}", True),
        (f"bearer {TOKEN}", True),
        (f"BEARER   {TOKEN} ", True),
        (f"Bearer {TOKEN}x", False),
        (f"Basic {TOKEN}", False),
        (TOKEN, False),
        ("Bearer", False),
        ("", False),
        (None, False),
        ("Bearer \udcff\udcfe", False),  # undecodable bytes as aiohttp hands them over
        ("Bearer \ud800", False),
    ],
)
def test_bearer_matches(header: str | None, matches: bool) -> None:
    assert Secret(TOKEN).matches_bearer(header) is matches


def _free_port() -> int:
    with socket.socket() as sock:  # a port nobody listens on: a probe that gets through fails fast
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, int]]:
    """The daemon and its web app on a free loopback port (its target a closed port: probes fail fast)."""
    config = load_config(
        f"global: {{probe_token: {{env: PROBE_TOKEN}}}}\n"
        f"targets: [{{name: t, url: 'http://127.0.0.1:{_free_port()}'}}]\n"
        "modules: {m: {workload: {prompt_tokens: 'fixed:16', output_tokens: 'fixed:4'}, requests_per_run: 1}}\n"
        "jobs: {api_token: {env: JOBS_TOKEN}}\n",
        environ=ENV,
    )
    daemon = Daemon(config)
    runner = web.AppRunner(web_app(daemon))
    await runner.setup()  # starts the daemon
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield "127.0.0.1", site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()  # stops the daemon


async def _status(server: tuple[str, int], path: str, authorization: str | None) -> int:
    headers = {"Authorization": authorization} if authorization is not None else {}
    url = f"http://{server[0]}:{server[1]}{path}"
    async with aiohttp.ClientSession() as session, session.get(url, headers=headers) as response:
        return response.status


@pytest.mark.parametrize("path", [PROBE, JOBS])
@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {TOKEN}", TOKEN, f"Bearer {TOKEN}x"])
async def test_without_the_token_both_routes_answer_401(
    server: tuple[str, int], path: str, header: str | None
) -> None:
    assert await _status(server, path, header) == 401


@pytest.mark.parametrize("path", [PROBE, JOBS])
@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER"])
async def test_both_routes_take_the_scheme_in_any_case(
    server: tuple[str, int], path: str, scheme: str
) -> None:
    assert await _status(server, path, f"{scheme} {TOKEN}") == 200


@pytest.mark.parametrize("path", [PROBE, JOBS])
@pytest.mark.parametrize(
    "value", [b"Bearer \xff\xfe", b"\xc3\x28 " + TOKEN.encode(), b"Bearer " + TOKEN.encode()[:-1]]
)
async def test_undecodable_header_bytes_answer_401_not_500(
    server: tuple[str, int], path: str, value: bytes
) -> None:
    assert await raw_status(*server, path, value) == 401
