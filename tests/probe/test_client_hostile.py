"""A hostile target's endless bytes end the request at a bound (``streams.limits``), with its own outcome.

Beside the simulator's fault matrix (``test_client_faults.py``): those faults break a stream; these try
to fill the client's memory. Each ends ``too_large`` or ``overlong`` rather than at the total timeout
(set far off here, so an outcome of the bound is the proof it was the bound that ended it).
"""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from exporter.probe.client import ProbeClient
from exporter.probe.stream_reader import BATCH_READS
from exporter.settings.target import TargetSettings
from exporter.streams.limits import overlong_limit
from exporter.streams.request import RequestSpec, Timeouts
from exporter.streams.result import Outcome
from tests.support.hostile import MODEL, HostileServer

pytestmark = [pytest.mark.usefixtures("both_reads"), pytest.mark.timeout(60)]

# Only the total limit could end these requests, and not within the test's time.
FAR = Timeouts(connect=5.0, ttft=None, idle=None, total=120.0)


def settings(server: HostileServer, **overrides: object) -> TargetSettings:
    fields: dict[str, object] = {"base_url": server.url, "model": MODEL, "timeouts": FAR, **overrides}
    return TargetSettings(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("endless_event", "SSE event of more than 4194304 bytes without an end"),
        ("endless_headers", "more than 100 response headers"),
        ("endless_header", "response headers longer than 65536 bytes"),
    ],
)
async def test_an_endless_stream_response_ends_too_large(mode: str, error: str) -> None:
    async with HostileServer(mode) as server, ProbeClient(settings(server)) as client:
        result = await client.send(RequestSpec(prompt="hi", max_tokens=16))
    assert (result.outcome, result.error) == (Outcome.TOO_LARGE, error)
    assert result.finished_at is not None


async def test_a_stream_past_its_max_tokens_ends_overlong() -> None:
    """2,000,000 token events for a 16-token request were once read to the total timeout and called ok."""
    async with HostileServer("endless_tokens") as server, ProbeClient(settings(server)) as client:
        result = await client.send(RequestSpec(prompt="hi", max_tokens=16))
    assert result.outcome is Outcome.OVERLONG, result.error
    # Checked after each read decoded before the first token, then after each batch of kept reads.
    assert overlong_limit(16) < result.token_events <= overlong_limit(16) + BATCH_READS * 2000
    assert result.error is not None and result.error.endswith("for max_tokens 16 (at most 24)")


async def test_a_stream_of_events_without_tokens_ends_overlong() -> None:
    """Role-only chunks without end hold no memory but would hold the request to its total timeout."""
    async with HostileServer("endless_empty") as server, ProbeClient(settings(server)) as client:
        result = await client.send(RequestSpec(prompt="hi", max_tokens=16))
    assert result.outcome is Outcome.OVERLONG, result.error
    assert result.token_events == 0
    assert result.error is not None and result.error.endswith("for max_tokens 16 (at most 112)")


@pytest.mark.parametrize(
    ("mode", "error"),
    [
        ("huge_body", "response body longer than 1048576 bytes"),
        ("endless_headers", "more than 100 response headers"),
        ("endless_header", "response headers longer than 65536 bytes"),
        ("endless_trailer", "bytes of chunk lines and trailers for 66 of body"),
    ],
)
async def test_an_endless_models_answer_ends_too_large(mode: str, error: str) -> None:
    async with HostileServer(mode) as server, ProbeClient(settings(server, model=None)) as client:
        result = await client.send(RequestSpec(prompt="hi", max_tokens=16))
        requests = list(server.requests)
    assert result.outcome is Outcome.TOO_LARGE
    assert result.error is not None and result.error.startswith(f"GET {server.url}/v1/models: ")
    assert result.error.endswith(error)
    assert requests == ["GET /v1/models"]  # no stream asked of a target whose model is unknown


@pytest.mark.parametrize(
    "mode", ["endless_event", "endless_headers", "endless_header", "endless_tokens", "endless_empty"]
)
async def test_a_hostile_answer_holds_memory_in_proportion_to_the_bound(mode: str) -> None:
    """Python's allocations at their peak while the request runs (the server's own included) stay
    within a few times the 1 MiB event bound, and are given back when it ends."""
    async with HostileServer(mode) as server, ProbeClient(settings(server, max_line_bytes=1 << 20)) as client:
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            result = await client.send(RequestSpec(prompt="hi", max_tokens=16))
            del result.token_times[:]  # what the result keeps is the caller's, not a leak
            gc.collect()
            after, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert result.outcome in (Outcome.TOO_LARGE, Outcome.OVERLONG)
    assert peak - before < 8 << 20
    assert after - before < 1 << 20
