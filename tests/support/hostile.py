"""A hostile target: a raw asyncio server on 127.0.0.1 that answers every request with bytes without end.

Each mode is a way a broken or hostile server can try to fill the client's memory; the client must end
each with its own outcome, soon, and give the memory back (``streams.limits``). The bytes are written as
fast as the client takes them, up to ``limit_bytes`` a connection, so a client that never stops ends
the test at its time limit rather than filling the disk of a log or the machine's memory.

=====================  ========================================================================
``endless_event``      200 ``text/event-stream``, then ``data:`` lines without a blank line
``endless_headers``    a status line, then headers without end (each a new name)
``endless_header``     a status line, then one header whose value never ends
``endless_tokens``     a valid chat stream whose content chunks never stop (``max_tokens`` ignored)
``endless_empty``      a valid chat stream of role-only chunks (no token) that never stops
``huge_body``          200 with a chunked body without end: ``/v1/models``, ``/metrics``
``endless_trailer``    200 with a small chunked body, then one trailer whose value never ends
``redirect``           ``/metrics`` answers 302 to ``location`` (another host)
=====================  ========================================================================

``GET /v1/models`` is answered normally (one model, ``hostile``) except in the modes that are about
every response (``endless_headers``, ``endless_header``, ``huge_body``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Final

MODES: Final = (
    "endless_event",
    "endless_headers",
    "endless_header",
    "endless_tokens",
    "endless_empty",
    "huge_body",
    "endless_trailer",
    "redirect",
)
PIECE_BYTES: Final = 64 * 1024  # one write: the client reads at most a socket buffer at a time anyway
MODEL: Final = "hostile"
_EVERY_RESPONSE: Final = frozenset({"endless_headers", "endless_header", "huge_body", "endless_trailer"})
TOKEN_EVENT: Final = (  # one content chunk of a valid chat stream
    b'data: {"id":"h","object":"chat.completion.chunk","model":"hostile",'
    b'"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\n\n'
)
_MODELS: Final = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
_EMPTY_EVENT: Final = TOKEN_EVENT.replace(b'"content":"a"', b'"role":"assistant"')


@dataclass
class HostileServer:
    """Serves ``mode`` on 127.0.0.1 (any free port) while inside ``async with``."""

    mode: str
    location: str = ""  # where ``redirect`` sends /metrics
    limit_bytes: int = 1 << 30  # the most one connection is sent (a bound on a test gone wrong)
    requests: list[str] = field(default_factory=list)  # "METHOD /path" of every request, in order
    sent_bytes: int = 0  # over every connection
    url: str = ""  # the base URL (no ``/v1``), once started
    _server: asyncio.Server | None = None
    _handlers: dict[asyncio.Task[None], asyncio.StreamWriter] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown hostile mode {self.mode!r}; valid: {', '.join(MODES)}")

    async def __aenter__(self) -> HostileServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in self._handlers.values():  # a handler still writing ends on its broken connection
            writer.transport.abort()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await asyncio.gather(*self._handlers, return_exceptions=True)
                await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers[task] = writer
        try:
            while (request := await _read_request(reader)) is not None:
                self.requests.append(request)
                if not await self._answer(request, writer):
                    break
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the client gave up on us: what it should do
        finally:
            writer.close()
            del self._handlers[task]

    async def _answer(self, request: str, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; returns whether the connection may serve another."""
        path = request.split(" ")[1]
        if path.endswith("/v1/models") and self.mode not in _EVERY_RESPONSE:
            writer.write(_head(200, "application/json", f"Content-Length: {len(_MODELS)}") + _MODELS)
            await writer.drain()
            return True
        if self.mode == "redirect":
            writer.write(_head(302, "text/plain", f"Location: {self.location}", "Content-Length: 0"))
            await writer.drain()
            return True
        await self._send(writer, self._pieces())
        return False

    def _pieces(self) -> Iterator[bytes]:
        """The bytes of the mode's answer, without end."""
        if self.mode == "endless_headers":
            yield b"HTTP/1.1 200 OK\r\n"
            yield from _numbered(lambda n: b"X-Filler-%d: %d\r\n" % (n, n))
        elif self.mode == "endless_header":
            yield b"HTTP/1.1 200 OK\r\nX-Filler: "
            yield from _repeated(b"a")
        elif self.mode == "endless_event":
            yield _head(200, "text/event-stream", "Transfer-Encoding: chunked")
            yield from _chunked(_repeated(b"data: x\n"))
        elif self.mode in ("endless_tokens", "endless_empty"):
            event = TOKEN_EVENT if self.mode == "endless_tokens" else _EMPTY_EVENT
            yield _head(200, "text/event-stream", "Transfer-Encoding: chunked")
            yield from _chunked(_repeated(event))
        elif self.mode == "endless_trailer":
            yield _head(200, "application/json", "Transfer-Encoding: chunked")
            yield from _chunked(iter([_MODELS]))
            yield b"0\r\nX-Trailer: "
            yield from _repeated(b"a")
        else:  # huge_body: a /metrics page or a /v1/models answer that never ends
            yield _head(200, "text/plain", "Transfer-Encoding: chunked")
            yield from _chunked(_repeated(b"# a comment line of an endless page\n"))

    async def _send(self, writer: asyncio.StreamWriter, pieces: Iterator[bytes]) -> None:
        sent = 0
        for piece in pieces:
            writer.write(piece)
            await writer.drain()
            sent += len(piece)
            self.sent_bytes += len(piece)
            if sent >= self.limit_bytes:
                return


async def _read_request(reader: asyncio.StreamReader) -> str | None:
    """ "METHOD /path" of the next request on the connection, its body read and dropped; None at its end."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    await reader.readexactly(length)
    method, path = lines[0].split(" ")[:2]
    return f"{method} {path}"


def _head(status: int, content_type: str, *headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status} X", f"Content-Type: {content_type}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _repeated(unit: bytes) -> Iterator[bytes]:
    piece = unit * max(1, PIECE_BYTES // len(unit))
    while True:
        yield piece


def _numbered(line: Callable[[int], bytes]) -> Iterator[bytes]:
    """``line(0)``, ``line(1)``, ... in writes of a thousand lines."""
    n = 0
    while True:
        yield b"".join(line(k) for k in range(n, n + 1000))
        n += 1000


def _chunked(pieces: Iterator[bytes]) -> Iterator[bytes]:
    for piece in pieces:
        yield b"%x\r\n%s\r\n" % (len(piece), piece)
