"""Fault injection: responses that break in each way a real endpoint (or the network) can.

A fault comes from the request (``"sim": {"fault": "reset"}`` or ``{"mode": "stall", "at": 5,
"duration": 2.0}``) or is drawn per request from the configured ``fault_rates``. Modes:

=======================  ==========================================================================
``http_500``             500 with OpenAI's error JSON
``http_503``             503 with OpenAI's error JSON
``http_429``             429 with OpenAI's error JSON and ``Retry-After: 1``
``reset``                ``at`` chunks, then a TCP reset (RST, SO_LINGER 0) mid-stream
``malformed_sse``        a truncated JSON ``data:`` line before chunk ``at``, then the rest
``invalid_utf8``         a ``data:`` line holding invalid UTF-8 bytes before chunk ``at``, then the rest
``hang_before_headers``  nothing at all for ``duration`` seconds, then the normal response
``stall``                ``at`` chunks, then no bytes for ``duration`` seconds, then the rest
``slow_drip``            the whole response in 8-byte writes ``interval`` seconds apart
``wrong_content_type``   200 with ``Content-Type: text/html`` and an HTML body
``oversized_line``       one valid chunk whose ``data:`` line is ``size`` bytes, before chunk ``at``
=======================  ==========================================================================

For a non-streaming request the "chunks" are the one JSON body: mid-stream faults apply to it whole.
Faulted responses take the simple path (one coroutine, ``asyncio.sleep``); their timing need not be
precise and they never touch the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
from collections.abc import Sequence

from aiohttp import web

from exporter.sim.protocol import FAULT_MODES, FaultSpec, error_body

__all__ = ["FAULT_MODES", "http_error", "normal_pieces", "run_fault"]

_HTTP_FAULTS = {
    "http_500": (500, "server_error", "simulated internal server error"),
    "http_503": (503, "service_unavailable", "simulated overload: service unavailable"),
    "http_429": (429, "rate_limit_error", "simulated rate limit: too many requests"),
}
_DRIP_BYTES = 8
MALFORMED_LINE = b'data: {"id":"broken","choices":[{"index":0,"text":"\n\n'
INVALID_UTF8_LINE = b'data: {"id":"bad-utf8","choices":[{"index":0,"text":"\xff\xfe\xc3("}]}\n\n'


def oversized_line(size: int) -> bytes:
    """A valid completion chunk whose ``data:`` line is ``size`` bytes long (at least its frame)."""
    frame = (
        b'data: {"id":"oversized","object":"text_completion",'
        b'"choices":[{"index":0,"text":"","finish_reason":null}]}'
    )
    padding = max(0, size - len(frame))
    return frame.replace(b'"text":""', b'"text":"' + b"a" * padding + b'"') + b"\n\n"


def http_error(mode: str) -> web.Response:
    """The error response of an ``http_*`` fault."""
    status, err_type, message = _HTTP_FAULTS[mode]
    headers = {"Retry-After": "1"} if status == 429 else None
    return web.json_response(error_body(message, err_type, None, str(status)), status=status, headers=headers)


def _reset(request: web.Request) -> None:
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        # SO_LINGER with a zero timeout makes close() send RST instead of FIN: a real connection reset.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def _inject(pieces: list[bytes], fault: FaultSpec, streaming: bool) -> list[bytes]:
    at = min(fault.at, len(pieces))
    extra = {
        "malformed_sse": MALFORMED_LINE,
        "invalid_utf8": INVALID_UTF8_LINE,
        "oversized_line": oversized_line(fault.size),
    }.get(fault.mode)
    if extra is None:
        return pieces
    if not streaming:
        # One JSON body: corrupt the body itself.
        body = pieces[0] if pieces else b"{}"
        damaged = {"malformed_sse": body[: len(body) // 2], "invalid_utf8": body[:-1] + b'"\xff\xfe"}'}
        return [damaged.get(fault.mode, extra.removeprefix(b"data: ").rstrip())]
    return [*pieces[:at], extra, *pieces[at:]]


async def _write_all(
    resp: web.StreamResponse, pieces: Sequence[bytes], gap: float, drip: float | None
) -> None:
    for piece in pieces:
        if drip is None:
            await resp.write(piece)
        else:
            for offset in range(0, len(piece), _DRIP_BYTES):
                await resp.write(piece[offset : offset + _DRIP_BYTES])
                await asyncio.sleep(drip)
        await asyncio.sleep(gap)


async def run_fault(
    request: web.Request, fault: FaultSpec, pieces: list[bytes], streaming: bool, gap: float
) -> web.StreamResponse:
    """Answer ``request`` with ``fault`` applied to the normal response ``pieces`` (SSE events or a body)."""
    if fault.mode in _HTTP_FAULTS:
        return http_error(fault.mode)
    if fault.mode == "hang_before_headers":
        await asyncio.sleep(fault.duration)
    if fault.mode == "wrong_content_type":
        return web.Response(
            status=200, text="<html><body>not an event stream</body></html>", content_type="text/html"
        )
    content_type = "text/event-stream" if streaming else "application/json"
    resp = web.StreamResponse(headers={"Content-Type": content_type, "Cache-Control": "no-cache"})
    # A client that gives up on a faulty stream (as a probe with timeouts should) is no error of ours.
    with contextlib.suppress(ConnectionError):
        await resp.prepare(request)
        await _stream_fault(request, resp, _inject(pieces, fault, streaming), fault, gap)
    return resp


async def _stream_fault(
    request: web.Request, resp: web.StreamResponse, pieces: list[bytes], fault: FaultSpec, gap: float
) -> None:
    at = min(fault.at, len(pieces))
    drip = fault.interval if fault.mode == "slow_drip" else None
    await _write_all(resp, pieces[:at] if fault.mode in ("reset", "stall") else pieces, gap, drip)
    if fault.mode == "reset":
        _reset(request)
        return
    if fault.mode == "stall":
        await asyncio.sleep(fault.duration)
        await _write_all(resp, pieces[at:], gap, None)
    await resp.write_eof()


def normal_pieces(events: Sequence[str], body: dict[str, object] | None) -> list[bytes]:
    """The unfaulted response as pieces: one per SSE event, or the JSON body whole."""
    if body is not None:
        return [json.dumps(body).encode("utf-8")]
    return [f"data: {event}\n\n".encode() for event in events]
