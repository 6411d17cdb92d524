"""Every fault mode does what it says, seen from a real client over a real socket."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

import aiohttp
import pytest

from exporter.sim import SimServer
from exporter.sim.faults import FAULT_MODES
from tests.sim.sim_helpers import completion_body
from tests.support.sim import StartSim


def faulted(fault: Any, **fields: Any) -> dict[str, Any]:
    return completion_body(**{"max_tokens": 6, **fields}, sim={"fault": fault})


async def raw_exchange(server: SimServer, body: dict[str, Any]) -> tuple[bytes, BaseException | None]:
    """Send one HTTP/1.1 request on a raw socket; returns what arrived and how the connection ended."""
    assert server.address is not None
    reader, writer = await asyncio.open_connection(*server.address)
    payload = json.dumps(body).encode()
    head = "POST /v1/completions HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\n"
    writer.write(f"{head}Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n".encode() + payload)
    received, ending = b"", None
    try:
        while chunk := await asyncio.wait_for(reader.read(65536), 5):
            received += chunk
    except (ConnectionResetError, TimeoutError) as exc:
        ending = exc
    writer.close()
    return received, ending


def data_lines(body: bytes) -> list[bytes]:
    return [line[len(b"data: ") :] for line in body.split(b"\n") if line.startswith(b"data: ")]


@pytest.mark.parametrize(("mode", "status"), [("http_500", 500), ("http_503", 503), ("http_429", 429)])
async def test_http_error_faults(
    sim: SimServer, session: aiohttp.ClientSession, mode: str, status: int
) -> None:
    async with session.post(sim.url + "/v1/completions", json=faulted(mode)) as resp:
        data = await resp.json()
    assert resp.status == status
    assert set(data["error"]) == {"message", "type", "param", "code"}
    if status == 429:
        assert resp.headers["Retry-After"] == "1"


async def test_reset_mid_stream_sends_rst_after_some_chunks(sim: SimServer) -> None:
    received, ending = await raw_exchange(sim, faulted({"mode": "reset", "at": 2}))
    assert isinstance(ending, ConnectionResetError)
    assert b"200 OK" in received
    assert len(data_lines(received)) == 2 and b"[DONE]" not in received


async def test_malformed_sse_line_then_the_rest(sim: SimServer, session: aiohttp.ClientSession) -> None:
    async with session.post(
        sim.url + "/v1/completions", json=faulted({"mode": "malformed_sse", "at": 1})
    ) as resp:
        lines = data_lines(await resp.read())
    bad = []
    for line in lines[:-1]:
        try:
            json.loads(line)
        except json.JSONDecodeError:
            bad.append(line)
    assert len(bad) == 1 and lines.index(bad[0]) == 1
    assert lines[-1] == b"[DONE]" and len(lines) == 6 + 2


async def test_invalid_utf8_line(sim: SimServer, session: aiohttp.ClientSession) -> None:
    async with session.post(sim.url + "/v1/completions", json=faulted("invalid_utf8")) as resp:
        lines = data_lines(await resp.read())
    undecodable = []
    for line in lines:
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            undecodable.append(line)
    assert len(undecodable) == 1 and lines[-1] == b"[DONE]"


async def test_hang_before_headers(sim: SimServer, session: aiohttp.ClientSession) -> None:
    start = time.monotonic()
    async with session.post(
        sim.url + "/v1/completions", json=faulted({"mode": "hang_before_headers", "duration": 0.3})
    ) as resp:
        headers_at = time.monotonic() - start
        await resp.read()
    assert headers_at >= 0.3 and resp.status == 200
    timeout = aiohttp.ClientTimeout(total=0.2)
    with pytest.raises(TimeoutError):
        await session.post(sim.url + "/v1/completions", json=faulted("hang_before_headers"), timeout=timeout)


async def test_stall_with_no_bytes_then_the_rest(sim: SimServer, session: aiohttp.ClientSession) -> None:
    stamps: list[float] = []
    body = faulted({"mode": "stall", "at": 2, "duration": 0.3})
    async with session.post(sim.url + "/v1/completions", json=body) as resp:
        async for line in resp.content:
            if line.startswith(b"data: "):
                stamps.append(time.monotonic())
    longest = max(b - a for a, b in itertools.pairwise(stamps))
    assert longest >= 0.3 and len(stamps) == 6 + 1
    assert stamps[2] - stamps[1] == longest


async def test_slow_drip_delivers_everything_slowly(sim: SimServer, session: aiohttp.ClientSession) -> None:
    body = faulted({"mode": "slow_drip", "interval": 0.002}, max_tokens=2)
    start = time.monotonic()
    reads = 0
    received = b""
    async with session.post(sim.url + "/v1/completions", json=body) as resp:
        async for piece in resp.content.iter_any():
            reads += 1
            received += piece
    elapsed = time.monotonic() - start
    lines = data_lines(received)
    assert lines[-1] == b"[DONE]" and all(json.loads(line) for line in lines[:-1])
    writes = sum(-(-len(line) // 8) for line in received.split(b"\n\n"))
    assert elapsed >= 0.002 * writes * 0.5 and reads > 10


async def test_wrong_content_type(sim: SimServer, session: aiohttp.ClientSession) -> None:
    async with session.post(sim.url + "/v1/completions", json=faulted("wrong_content_type")) as resp:
        text = await resp.text()
    assert resp.status == 200 and resp.content_type == "text/html" and "<html>" in text


async def test_oversized_line(sim: SimServer, session: aiohttp.ClientSession) -> None:
    body = faulted({"mode": "oversized_line", "size": 200_000, "at": 1})
    async with session.post(sim.url + "/v1/completions", json=body) as resp:
        lines = (await resp.read()).split(b"\n")
    big = [line for line in lines if len(line) >= 200_000]
    assert len(big) == 1 and len(big[0]) == 200_000
    assert json.loads(big[0][len(b"data: ") :])["choices"][0]["text"].startswith("aaa")


async def test_non_streaming_faults_damage_the_body(sim: SimServer, session: aiohttp.ClientSession) -> None:
    async with session.post(sim.url + "/v1/completions", json=faulted("malformed_sse", stream=False)) as resp:
        raw = await resp.read()
    with pytest.raises(json.JSONDecodeError):
        json.loads(raw)


async def test_configured_fault_rates_apply_to_a_share_of_requests(
    start_sim: StartSim, session: aiohttp.ClientSession
) -> None:
    server = await start_sim(fault_rates={"http_503": 0.5}, seed=3)
    statuses = []
    for _ in range(40):
        async with session.post(
            server.url + "/v1/completions", json={**completion_body(), "stream": False}
        ) as resp:
            statuses.append(resp.status)
    assert set(statuses) == {200, 503}
    assert 8 <= statuses.count(503) <= 32


async def test_error_event_ends_the_stream_after_some_chunks(
    sim: SimServer, session: aiohttp.ClientSession
) -> None:
    async with session.post(
        sim.url + "/v1/completions", json=faulted({"mode": "error_event", "at": 2})
    ) as resp:
        lines = data_lines(await resp.read())
    assert resp.status == 200 and len(lines) == 3 and b"[DONE]" not in lines
    assert json.loads(lines[-1])["error"]["message"] == "simulated failure in the middle of the stream"


async def test_no_end_leaves_out_the_closing_events(sim: SimServer, session: aiohttp.ClientSession) -> None:
    body = faulted("no_end", stream_options={"include_usage": True})
    async with session.post(sim.url + "/v1/completions", json=body) as resp:
        lines = data_lines(await resp.read())
    assert len(lines) == 6 and b"[DONE]" not in lines and all(b'"usage"' not in line for line in lines)


def test_every_fault_mode_is_tested_here() -> None:
    source = open(__file__, encoding="utf-8").read()  # noqa: SIM115
    assert all(f'"{mode}"' in source for mode in FAULT_MODES)
