"""Every simulator fault mode ends as its outcome, with partial timings, and the client carries on."""

from __future__ import annotations

import asyncio
import errno
import gc
import socket
from typing import Any

import pytest

from exporter.probe import http
from exporter.probe.client import ProbeClient
from exporter.probe.stream_reader import StreamReader
from exporter.probe.watchdog import Watchdog
from exporter.settings.target import TargetSettings
from exporter.sim import SimServer
from exporter.sim.faults import FAULT_MODES
from exporter.streams.decoder import StreamState
from exporter.streams.request import RequestSpec, Timeouts
from exporter.streams.result import Outcome
from tests.probe.helpers import fault, script, settings_for

pytestmark = pytest.mark.usefixtures("both_reads")  # the stamped sockets read in C and in Python

# Limits short enough for quick tests, long enough that a slow drip on a busy VM is not a timeout.
FAST = Timeouts(connect=1.0, ttft=1.0, idle=0.5, total=5.0)

# mode -> (fault spec, expected outcome, HTTP status, content tokens before the failure)
CASES: dict[str, tuple[Any, Outcome, int | None, int]] = {
    "http_500": ("http_500", Outcome.HTTP_STATUS, 500, 0),
    "http_503": ("http_503", Outcome.HTTP_STATUS, 503, 0),
    "http_429": ("http_429", Outcome.RATE_LIMITED, 429, 0),
    "reset": ({"mode": "reset", "at": 3}, Outcome.STREAM_ABORTED, 200, 3),
    "malformed_sse": ({"mode": "malformed_sse", "at": 2}, Outcome.MALFORMED_STREAM, 200, 2),
    "invalid_utf8": ({"mode": "invalid_utf8", "at": 2}, Outcome.MALFORMED_STREAM, 200, 2),
    "hang_before_headers": ({"mode": "hang_before_headers", "duration": 3.0}, Outcome.TTFT_TIMEOUT, None, 0),
    "stall": ({"mode": "stall", "at": 2, "duration": 3.0}, Outcome.IDLE_TIMEOUT, 200, 2),
    "slow_drip": ({"mode": "slow_drip", "interval": 0.002}, Outcome.OK, 200, 6),
    "wrong_content_type": ("wrong_content_type", Outcome.MALFORMED_STREAM, 200, 0),
    "oversized_line": (
        {"mode": "oversized_line", "at": 1, "size": 100_000},
        Outcome.TOO_LARGE,  # a line over max_line_bytes (65536 here): streams.limits
        200,
        1,
    ),
    "error_event": ({"mode": "error_event", "at": 3}, Outcome.STREAM_ABORTED, 200, 3),
    # Completions end with a finish_reason chunk: a body that stops there without [DONE] is complete.
    "no_end": ("no_end", Outcome.OK, 200, 6),
}


def test_every_simulator_fault_mode_has_a_case() -> None:
    assert set(CASES) == set(FAULT_MODES)


@pytest.mark.parametrize("mode", sorted(CASES))
async def test_fault_mode_yields_its_outcome_and_the_client_carries_on(sim: SimServer, mode: str) -> None:
    spec, outcome, status, tokens = CASES[mode]
    settings = settings_for(sim, api="completions", timeouts=FAST, max_line_bytes=65536)
    async with ProbeClient(settings) as client:
        failed = await client.send(RequestSpec(prompt="hi", max_tokens=6, extra_body=fault(spec)))
        after = await client.send(RequestSpec(prompt="hi", max_tokens=6))
    assert failed.outcome is outcome, failed.error
    assert failed.http_status == status
    assert len(failed.token_times) == tokens  # partial timings are kept
    assert failed.finished_at is not None and failed.sent_at is not None
    assert (failed.error is None) == (outcome is Outcome.OK)
    assert after.outcome is Outcome.OK and after.output_tokens == 6


@pytest.mark.parametrize("mode", ["ok", *sorted(CASES)])
async def test_a_request_leaves_nothing_for_the_garbage_collector(sim: SimServer, mode: str) -> None:
    """A request's reader, state and watchdog go when it ends, failed or not, not in a reference cycle:
    at 300 streams the cycles requests left made each young collection free thousands of objects (up
    to 11 ms, reads waiting meanwhile) and brought a 65 ms full one."""
    extra = fault(CASES[mode][0]) if mode != "ok" else script(ttft=0.01, gaps=0.002)
    spec = RequestSpec(prompt="hi", max_tokens=6, extra_body=extra)
    settings = settings_for(sim, api="completions", timeouts=FAST, max_line_bytes=65536)
    async with ProbeClient(settings) as client:
        await client.send(RequestSpec(prompt="hi", max_tokens=2))  # the model resolved, a connection open
        gc.collect()
        gc.disable()
        try:
            result = await client.send(spec)
            left = [
                type(o).__name__
                for o in gc.get_objects()
                if isinstance(o, StreamReader | StreamState | Watchdog)
            ]
        finally:
            gc.enable()
    assert result.outcome is (CASES[mode][1] if mode != "ok" else Outcome.OK), result.error
    assert left == []


async def test_connection_refused_is_a_connect_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens once it is closed
    settings = TargetSettings(base_url=f"http://127.0.0.1:{port}", model="m", timeouts=FAST)
    async with ProbeClient(settings) as client:
        result = await client.send(RequestSpec(prompt="hi", max_tokens=4))
    assert result.outcome is Outcome.CONNECT_ERROR and result.http_status is None


async def test_unresolvable_model_fails_the_request_not_the_caller() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with ProbeClient(TargetSettings(base_url=f"http://127.0.0.1:{port}", timeouts=FAST)) as client:
        result = await client.send(RequestSpec(prompt="hi", max_tokens=4))
    assert result.outcome is Outcome.CONNECT_ERROR and "/v1/models" in (result.error or "")


async def test_total_timeout_mid_stream(sim: SimServer) -> None:
    timeouts = Timeouts(connect=1.0, ttft=1.0, idle=1.0, total=0.3)
    spec = RequestSpec(prompt="hi", max_tokens=100, extra_body=script(ttft=0.01, gaps=0.02))
    async with ProbeClient(settings_for(sim, timeouts=timeouts)) as client:
        result = await client.send(spec)
    assert result.outcome is Outcome.TOTAL_TIMEOUT
    assert 1 <= len(result.token_times) < 100  # partial timings kept


@pytest.mark.parametrize(("model", "status"), [("no-such-model", 404), (None, 400)])
async def test_client_errors_are_http_status(sim: SimServer, model: str | None, status: int) -> None:
    extra = (("max_tokens", -1),) if model is None else ()
    async with ProbeClient(settings_for(sim, model=model, timeouts=FAST)) as client:
        result = await client.send(RequestSpec(prompt="hi", max_tokens=4, extra_body=extra))
    assert result.outcome is Outcome.HTTP_STATUS and result.http_status == status
    assert result.error is not None and result.error.startswith(f"HTTP {status}: ")


async def test_cancellation_propagates_and_the_client_stays_usable(sim: SimServer) -> None:
    spec = RequestSpec(prompt="hi", max_tokens=100, extra_body=script(ttft=0.01, gaps=0.02))
    async with ProbeClient(settings_for(sim, timeouts=FAST)) as client:
        task = asyncio.create_task(client.send(spec))
        await asyncio.sleep(0.15)  # mid-stream
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        after = await client.send(RequestSpec(prompt="hi", max_tokens=3))
    assert after.outcome is Outcome.OK


@pytest.mark.parametrize(
    ("tokens", "stall_at", "ttft"),
    [
        (6, 1, 10.0),  # a stall right after the first token, long before the TTFT limit would look
        (60, 50, 10.0),  # a stall late in a long stream
        (6, 1, None),  # no TTFT limit and no total: the idle limit alone
    ],
)
async def test_idle_limit_holds_before_the_ttft_limit_would_have_passed(
    sim: SimServer, tokens: int, stall_at: int, ttft: float | None
) -> None:
    """With ``ttft: 10 s, idle: 0.4 s`` a 1.5 s silence once tokens flow is an idle timeout: the watchdog
    re-arms at the first token instead of sleeping until the TTFT limit (which would see a stream that
    had long resumed and call it ok), also when there is no TTFT limit to sleep until."""
    timeouts = Timeouts(connect=1.0, ttft=ttft, idle=0.4, total=None if ttft is None else 20.0)
    spec = RequestSpec(
        prompt="hi", max_tokens=tokens, extra_body=fault({"mode": "stall", "at": stall_at, "duration": 1.5})
    )
    async with ProbeClient(settings_for(sim, api="completions", timeouts=timeouts)) as client:
        result = await client.send(spec)
    assert result.outcome is Outcome.IDLE_TIMEOUT, result.error
    assert len(result.token_times) == stall_at  # partial timings kept, up to the stall
    assert result.finished_at is not None and result.token_times
    silence = result.finished_at - result.token_times[-1]
    assert 0.4 <= silence < 1.4  # ended by the idle limit, not by the stall's end (1.5 s)


@pytest.mark.parametrize(
    ("timeouts", "outcome", "message"),
    [
        # Connecting counts towards the time to the first token, as it does for a user.
        (
            Timeouts(connect=5.0, ttft=0.3, idle=1.0, total=5.0),
            Outcome.TTFT_TIMEOUT,
            "ttft_timeout after 0.3 s",
        ),
        (
            Timeouts(connect=5.0, ttft=None, idle=1.0, total=0.3),
            Outcome.TOTAL_TIMEOUT,
            "total_timeout after 0.3 s",
        ),
        (
            Timeouts(connect=0.3, ttft=5.0, idle=1.0, total=5.0),
            Outcome.CONNECT_ERROR,
            "connect timed out after 0.3 s",
        ),
    ],
)
async def test_a_connect_that_never_completes_ends_at_the_earliest_limit(
    timeouts: Timeouts, outcome: Outcome, message: str
) -> None:
    """A TLS server that accepts the connection and never answers the handshake: the request ends at
    whichever limit comes first, the connect limit or the request's own."""
    silent = await asyncio.start_server(lambda _r, _w: None, "127.0.0.1", 0)
    port = silent.sockets[0].getsockname()[1]
    settings = TargetSettings(
        base_url=f"https://127.0.0.1:{port}", model="m", verify_tls=False, timeouts=timeouts
    )
    try:
        async with ProbeClient(settings) as client:
            started = asyncio.get_running_loop().time()
            result = await client.send(RequestSpec(prompt="hi", max_tokens=4))
            waited = asyncio.get_running_loop().time() - started
    finally:
        silent.close()
    assert (result.outcome, result.error) == (outcome, message)
    assert 0.3 <= waited < 2.0


@pytest.mark.parametrize(
    "timeouts",
    [
        Timeouts(connect=None, ttft=5.0, idle=1.0, total=10.0),
        Timeouts(connect=8.0, ttft=5.0, idle=1.0, total=10.0),
        Timeouts(connect=None, ttft=None, idle=None, total=None),
    ],
)
async def test_the_systems_own_connect_timeout_is_a_connect_error(
    monkeypatch: pytest.MonkeyPatch, timeouts: Timeouts
) -> None:
    """The kernel gives up a connect on its own (ETIMEDOUT, after its SYN retries: about two minutes)
    before any limit of ours: a connect error, not the request's TTFT or total limit. (Stood in for:
    loopback answers a SYN at once, so a real one takes minutes to provoke.)"""

    async def open_times_out(_pool: http.ConnectionPool, _endpoint: http.Endpoint) -> http.HttpConnection:
        await asyncio.sleep(0.05)
        raise TimeoutError(errno.ETIMEDOUT, "Connection timed out")

    monkeypatch.setattr(http.ConnectionPool, "open", open_times_out)
    settings = TargetSettings(base_url="http://127.0.0.1:9", model="m", timeouts=timeouts)
    async with ProbeClient(settings) as client:
        result = await asyncio.wait_for(client.send(RequestSpec(prompt="hi", max_tokens=3)), 5.0)
    assert result.outcome is Outcome.CONNECT_ERROR
    assert result.error == "cannot connect to 127.0.0.1:9: [Errno 110] Connection timed out"
