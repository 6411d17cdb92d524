"""A ground-truth streaming server: OpenAI-style SSE chunks on a script, each write stamped and logged.

``python bench/truth_server.py`` listens on 127.0.0.1 (port 0 unless ``--port``), prints ``PORT <n>`` once
it is ready, and serves

* ``POST /v1/completions`` and ``POST /v1/chat/completions`` with ``"stream": true``: ``max_tokens``
  content chunks (one token each) in vLLM's chunk shapes, the first ``truth.ttft`` seconds after the
  request arrived and each later one ``truth.gap`` seconds after the *scheduled* time of the one before
  (absolute times: no drift), then a finish chunk, a usage chunk and ``data: [DONE]``, over HTTP/1.1
  chunked transfer encoding on a keep-alive connection, as uvicorn sends them;
* ``GET /v1/models``: one model, ``truth``;
* ``GET /log``: ``{"written": {request id: [write stamps]}, "unsure": {request id: [chunk indexes]}}`` of
  every request since the last ``/log`` (then cleared), where a stamp is ``time.perf_counter()``
  (CLOCK_MONOTONIC on Linux: one clock for every process on the machine) taken just before the content
  chunk's bytes were handed to the socket, and an *unsure* chunk is one whose hand-over took more than
  ``UNSURE_WRITE_S`` (the server was preempted between its stamp and its write: on this VM 12-41 of
  ~150,000 writes in a 300-stream run, by up to 5 ms), so its stamp may be early by that much. The
  request id is the body's ``truth.id``.

The stamps, not the script, are the truth a client is judged against: a write that was itself late (the
server's core was busy) is late for every client alike, and the log says when it really went out.

It runs on the standard asyncio event loop with one ``call_at`` timer per stream: plain and predictable
for a timer-heavy server (uvloop was measured *worse* here for this shape of work). Only for benchmarks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from typing import Any

HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream; charset=utf-8\r\n"
    b"transfer-encoding: chunked\r\ncache-control: no-cache\r\n\r\n"
)
TOKEN_TEXT = " tok"
UNSURE_WRITE_S = 0.001  # a write that took longer leaves its stamp unsure by as much


def frame(payload: bytes) -> bytes:
    """One HTTP/1.1 chunk carrying ``payload``."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def sse(obj: Any) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def content_chunk(chat: bool, index: int) -> bytes:
    """A vLLM-shaped chunk carrying one token (its size is what real servers send, ~200 bytes)."""
    base: dict[str, Any] = {"id": f"cmpl-{index:08d}", "created": 1700000000, "model": "truth"}
    if chat:
        base["object"] = "chat.completion.chunk"
        choice = {"index": 0, "delta": {"content": TOKEN_TEXT}, "logprobs": None, "finish_reason": None}
    else:
        base["object"] = "text_completion"
        choice = {
            "index": 0,
            "text": TOKEN_TEXT,
            "logprobs": None,
            "finish_reason": None,
            "stop_reason": None,
        }
    base["choices"] = [choice]
    return frame(sse(base))


def closing_frames(chat: bool, tokens: int) -> bytes:
    finish: dict[str, Any] = {"index": 0, "finish_reason": "length"}
    if chat:
        finish["delta"] = {}
    else:
        finish["text"] = ""
    usage = {"prompt_tokens": 1, "completion_tokens": tokens, "total_tokens": tokens + 1}
    return (
        frame(sse({"id": "cmpl-end", "model": "truth", "choices": [finish]}))
        + frame(sse({"id": "cmpl-end", "model": "truth", "choices": [], "usage": usage}))
        + frame(b"data: [DONE]\n\n")
        + b"0\r\n\r\n"
    )


class Server:
    """The request log and the streams in flight."""

    def __init__(self) -> None:
        self.log: dict[str, list[float]] = {}
        self.unsure: dict[str, list[int]] = {}
        self.loop = asyncio.get_running_loop()

    def stream(self, transport: asyncio.Transport, body: dict[str, Any], chat: bool) -> None:
        truth = body.get("truth") or {}
        tokens = int(body.get("max_tokens") or 16)
        stamps: list[float] = []
        unsure: list[int] = []
        request_id = str(truth.get("id", len(self.log)))
        self.log[request_id], self.unsure[request_id] = stamps, unsure
        chunk = content_chunk(chat, len(self.log))
        gap = float(truth.get("gap", 0.02))
        transport.write(HEAD)
        start = self.loop.time() + float(truth.get("ttft", 0.05))

        def write(index: int) -> None:
            if transport.is_closing():
                return
            stamp = time.perf_counter()
            stamps.append(stamp)
            transport.write(chunk)
            if time.perf_counter() - stamp > UNSURE_WRITE_S:
                unsure.append(index)
            if index + 1 < tokens:
                self.loop.call_at(start + (index + 1) * gap, write, index + 1)
            else:
                transport.write(closing_frames(chat, tokens))

        self.loop.call_at(start, write, 0)


class Connection(asyncio.Protocol):
    """HTTP/1.1 with keep-alive: one request at a time, Content-Length bodies only."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n\r\n" in self.buffer:
            head, _, rest = self.buffer.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {
                k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])
            }
            length = int(headers.get("content-length", "0"))
            if len(rest) < length:
                return
            self.buffer = rest[length:]
            self.handle(lines[0].split(" ")[:2], rest[:length])

    def handle(self, request_line: list[str], raw: bytes) -> None:
        assert self.transport is not None
        method, path = request_line
        if method == "POST" and path in ("/v1/completions", "/v1/chat/completions"):
            self.server.stream(self.transport, json.loads(raw), chat="chat" in path)
        elif path == "/v1/models":
            self.reply(
                {"object": "list", "data": [{"id": "truth", "object": "model", "max_model_len": 8192}]}
            )
        elif path == "/log":
            self.reply({"written": self.server.log, "unsure": self.server.unsure})
            self.server.log, self.server.unsure = {}, {}
        else:
            self.transport.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")

    def reply(self, obj: Any) -> None:
        assert self.transport is not None
        payload = json.dumps(obj).encode()
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (len(payload), payload)
        )


async def serve(port: int) -> None:
    server = Server()
    listener = await server.loop.create_server(lambda: Connection(server), "127.0.0.1", port, backlog=4096)
    print(f"PORT {listener.sockets[0].getsockname()[1]}", flush=True)
    await listener.serve_forever()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--cpu", type=int, help="pin the server to this CPU")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.port))
    return 0


if __name__ == "__main__":
    sys.exit(main())
