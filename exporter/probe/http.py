"""A minimal HTTP/1.1 client on raw ``asyncio.Protocol``s, built for stamping streamed bytes cheaply.

Why not aiohttp for the stream: at a hundred streams nearly every chunk is its own wake-up of the event
loop, and aiohttp's path from the socket to a reading coroutine (its parser feeds a ``StreamReader``,
which wakes a future, which schedules a task step, which resumes several coroutine frames) costs a
plain client ~95 us of CPU per chunk on this project's VM. Here the socket's bytes reach
``data_received``, which stamps the clock *first*, lets httptools (llhttp, the C parser uvicorn uses)
strip the HTTP framing, and hands the body bytes of that read to the request's ``ResponseSink`` in the
same callback: no future, no task step per chunk.

On a kernel-stamped socket read in C (``socket_reads.NativeSocketReads``), the connection also tells the
transport when whole chunks may skip the parser: ``_keep`` turns on keep mode whenever the parser's
last step ended a chunk, and the reader then gets those chunks' events without a call per read.

What it speaks: ``POST``/``GET`` with a ``Content-Length`` body; responses framed by chunked transfer
encoding, ``Content-Length`` or the connection's close; keep-alive with a pool of idle connections per
(host, port); TLS through the loop's own ``create_connection(ssl=...)``. No redirects (a probe reports
a 3xx as the status it is), no proxies, no compression (``Accept-Encoding: identity``): a probe measures
the endpoint it was pointed at.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, cast
from urllib.parse import urlsplit

import httptools

from exporter.probe import socket_reads
from exporter.probe.socket_reads import KeepMode, kernel_stamps_available, kernel_stamps_on
from exporter.probe.stamped import StampedSocket, open_stamped
from exporter.streams.limits import FRAMING_PER_BODY_BYTE, HEAD_BYTES, HEADER_COUNT

Clock = Callable[[], float]


class HttpError(Exception):
    """The connection failed or the response was not valid HTTP (a network failure, not a bug)."""


class ConnectionClosedError(HttpError):
    """The server closed the connection before the response ended."""


class InvalidResponseError(HttpError):
    """The bytes received are not a valid HTTP/1.1 response."""


class ResponseTooLargeError(HttpError):
    """The response passed one of the bounds of ``streams.limits`` (its head, or its body)."""


class ResponseSink(Protocol):
    """Receives one response, from the connection's ``data_received`` (no I/O, no awaiting)."""

    def on_headers(self, now: float, status: int, headers: dict[str, str]) -> None:
        """The status line and headers (names lower-cased) are complete."""

    def on_read(self, now: float, body: bytes) -> None:
        """The body bytes of one socket read (HTTP framing removed), stamped when the read arrived."""

    def on_end(self, now: float, error: HttpError | None) -> None:
        """The response ended: complete (``error`` None) or cut short."""

    def keep_mode(self, unkeep: Callable[[], None]) -> KeepMode | None:
        """Where whole-chunk reads may go without a call of ``on_read`` (``socket_reads.KeepMode``), or None
        (every read to ``on_read``); ``unkeep`` ends that, and the sink calls it when it stops keeping."""


@dataclass(frozen=True)
class Endpoint:
    """Where requests go: scheme, host, port, and the path prefix of the base URL."""

    host: str
    port: int
    tls: bool
    path: str  # the base URL's path, without a trailing slash

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"expected an http:// or https:// URL with a host, got {url!r}")
        tls = parts.scheme == "https"
        return cls(parts.hostname, parts.port or (443 if tls else 80), tls, parts.path.rstrip("/"))

    @property
    def host_header(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.tls else 80
        return host if self.port == default else f"{host}:{self.port}"


def request_bytes(
    method: str, endpoint: Endpoint, path: str, headers: Iterable[tuple[str, str]], body: bytes = b""
) -> bytes:
    """The bytes of one HTTP/1.1 request (``path`` is appended to the endpoint's prefix)."""
    return with_body(request_head(method, endpoint, path, headers), body)


def request_head(method: str, endpoint: Endpoint, path: str, headers: Iterable[tuple[str, str]]) -> bytes:
    """A request's bytes up to its ``Content-Length``: the same for every request a client sends to
    one path, so made once (``with_body`` completes it)."""
    lines = [f"{method} {endpoint.path}{path} HTTP/1.1", f"Host: {endpoint.host_header}"]
    lines += [f"{name}: {value}" for name, value in headers]
    lines.append("Accept-Encoding: identity")
    return ("\r\n".join(lines) + "\r\n").encode("latin-1")


def with_body(head: bytes, body: bytes) -> bytes:
    """The request of ``request_head`` with ``body``."""
    return b"%sContent-Length: %d\r\n\r\n%s" % (head, len(body), body)


class HttpConnection(asyncio.Protocol):
    """One keep-alive connection; one request at a time. The network loop only stamps and frames.

    Over 150 lines, kept whole: it is the object httptools calls back (the parser looks its callbacks
    up on it once, when it is made), and ``received``, run on every read that is not kept, shares its
    state with those callbacks: the framing bytes and their bound, the chunk boundary keep mode waits
    for, the sink and whether the response is complete. Moving the callbacks or the framing bound to
    another object would cost a call or an attribute hop per read, on the path this client exists to
    make cheap; the pool, the small-body sink and the request bytes are apart already."""

    def __init__(self, clock: Clock, *, keeps: bool = False) -> None:
        """``keeps``: the transport will be a ``StampedSocket`` with keep mode (``_keep``)."""
        self._clock = clock
        self._transport: asyncio.Transport | None = None
        self._sink: ResponseSink | None = None
        self._headers: dict[str, str] = {}
        # Bytes of the current response that were not body (its head, chunk lines, trailers), and their
        # bound: HEAD_BYTES, and FRAMING_PER_BODY_BYTE more per byte of body (of the reads that come
        # here: not those kept in keep mode, which are whole chunks).
        self._framing = 0
        self._framing_limit = HEAD_BYTES
        self._header_count = 0
        self._too_large: ResponseTooLargeError | None = None  # raised by a callback, in the parser
        self._parts: list[bytes] = []
        # httptools' body callback, called once per read: the list's own append, so no Python frame
        # runs for it (the parser looks its callbacks up when it is made, hence before it).
        self.on_body: Callable[[bytes], None] = self._parts.append
        self._between_chunks = False  # the parser's last step ended a chunk (keep mode, below)
        if keeps:  # httptools looks its callbacks up once: elsewhere they would cost two calls a chunk
            self.on_chunk_header = self._chunk_started
            self.on_chunk_complete = self._chunk_ended
        self._parser = httptools.HttpResponseParser(self)
        self._now = 0.0
        self._complete = True  # no response in progress
        self._close_delimited = False
        self._headers_done = False
        self._keep_alive = False
        self.closed = False
        self.bytes_received = False  # any byte of the current response

    # -- asyncio.Protocol ---------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.received(self._clock(), data)  # the stamp first: it is the point of this client

    def received(self, now: float, data: bytes) -> None:
        """One read's bytes, stamped ``now`` (by ``data_received``, or by the kernel: ``stamped.py``)."""
        self._now = now
        if self._sink is None and self._complete:
            self.abort()  # bytes nobody asked for, on an idle connection: it cannot be trusted again
            self.closed = True
            return
        self.bytes_received = True
        parts = self._parts
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(self._too_large or InvalidResponseError(f"invalid HTTP response: {exc}"))
            return
        # The parser keeps a header's (or a trailer's) bytes until its line ends: bounded here.
        if parts:
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            parts.clear()
            self._framing += len(data) - len(body)
            self._framing_limit += FRAMING_PER_BODY_BYTE * len(body)
            if self._framing > self._framing_limit:
                self._fail(ResponseTooLargeError(self._framing_error()))
                return
            if self._sink is not None:
                self._sink.on_read(now, body)
        else:
            self._framing += len(data)
            if self._framing > self._framing_limit:
                self._fail(ResponseTooLargeError(self._framing_error()))
                return
        if self._complete and self._sink is not None:
            sink, self._sink = self._sink, None
            sink.on_end(now, None)
        elif self._between_chunks and data[-2:] == b"\r\n" and self._sink is not None:
            self._keep()

    def _framing_error(self) -> str:
        if not self._headers_done:
            return f"response headers longer than {HEAD_BYTES} bytes"
        body = (self._framing_limit - HEAD_BYTES) // FRAMING_PER_BODY_BYTE
        return f"{self._framing} bytes of chunk lines and trailers for {body} of body"

    def _keep(self) -> None:
        """The parser sits between two chunks (its last step ended one, and no byte of the next size
        line came after it): whole chunks may skip it, so let the transport keep them for the sink.
        A read the transport does not keep comes here and ends the mode until the next boundary."""
        transport = self._transport
        if not isinstance(transport, StampedSocket) or self._sink is None:
            return
        mode = self._sink.keep_mode(transport.unkeep)
        if mode is not None:
            transport.keep(mode)

    def _chunk_started(self) -> None:
        self._between_chunks = False

    def _chunk_ended(self) -> None:
        self._between_chunks = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._sink is None:
            return
        sink, self._sink = self._sink, None
        now = self._clock()
        if self._close_delimited and self._headers_done and not self._complete:
            self._complete = True
            sink.on_end(now, None)  # a body without length or chunks ends with the connection
            return
        reason = f"{type(exc).__name__}: {exc}" if exc is not None else "the server closed the connection"
        sink.on_end(now, ConnectionClosedError(reason))

    # -- httptools callbacks ------------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._between_chunks = False
        self._headers = {}
        self._headers_done = False
        self._header_count = 0

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_count += 1
        if self._header_count > HEADER_COUNT:
            # Raised inside the parser, which stops there; ``received`` reports it as this error.
            self._too_large = ResponseTooLargeError(f"more than {HEADER_COUNT} response headers")
            raise self._too_large
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._headers_done = True
        # Asked now: once the message is complete the parser has reset and always answers False.
        self._keep_alive = self._parser.should_keep_alive()
        headers = self._headers
        self._close_delimited = "content-length" not in headers and "chunked" not in headers.get(
            "transfer-encoding", ""
        )
        if self._sink is not None:
            self._sink.on_headers(self._now, self._parser.get_status_code(), headers)

    def on_message_complete(self) -> None:
        self._complete = True

    # -- requests -----------------------------------------------------------------------------------

    def start(self, request: bytes, sink: ResponseSink) -> None:
        """Write ``request``; its response goes to ``sink``."""
        if self._transport is None or self.closed:
            raise ConnectionClosedError("the connection is closed")
        self._sink = sink
        self._complete = False
        self._headers_done = False
        self._framing, self._framing_limit = 0, HEAD_BYTES
        self._close_delimited = False
        self.bytes_received = False
        self._transport.write(request)

    def catch_up(self) -> None:
        """Take in what the server sent since the last read (its close, above all): a paced socket
        (``stamped.py``) may hold it for up to a pace; the loop's transports deliver it as it comes."""
        if isinstance(self._transport, StampedSocket):
            self._transport.catch_up()

    def early_stamps(self) -> int:
        """How many of this connection's reads so far had a kernel stamp impossibly early, moved to the
        read's own time instead (``socket_reads.early_stamp``; 0 without kernel stamps)."""
        return self._transport.early_stamps() if isinstance(self._transport, StampedSocket) else 0

    @property
    def kernel_stamped(self) -> bool:
        """Whether this connection's reads carry the kernel's receive stamps (``stamped.py``)."""
        return isinstance(self._transport, StampedSocket)

    @property
    def reusable(self) -> bool:
        """Whether another request may be sent on this connection."""
        return (
            not self.closed
            and self._complete
            and self._sink is None
            and self._transport is not None
            and not self._transport.is_closing()
            and self._keep_alive
        )

    def close(self) -> None:
        """Close the connection (a response in progress ends as cut short)."""
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Close at once, discarding what is unsent."""
        if self._transport is not None:
            self._transport.abort()

    def detach(self) -> None:
        """Forget the current sink (its request was given up) and close the connection."""
        self._sink = None
        self.abort()

    def _fail(self, error: HttpError) -> None:
        sink, self._sink = self._sink, None
        self.abort()
        if sink is not None:
            sink.on_end(self._now, error)


class ConnectionPool:
    """Idle keep-alive connections per endpoint; opens new ones on demand (no limit: every stream of a
    capacity trial needs its own connection, and a queue here would be lateness nobody sees)."""

    def __init__(
        self, clock: Clock, ssl_context: ssl.SSLContext | None, *, kernel_stamps: bool = True
    ) -> None:
        self._clock = clock
        self._ssl = ssl_context
        self._kernel_stamps = kernel_stamps and kernel_stamps_available(clock) and kernel_stamps_on()
        self._idle: dict[Endpoint, list[HttpConnection]] = {}
        self._open: set[HttpConnection] = set()

    def reuse(self, endpoint: Endpoint) -> HttpConnection | None:
        """An idle connection to ``endpoint`` that can serve another request, or None (no waiting)."""
        idle = self._idle.get(endpoint)
        while idle:
            conn = idle.pop()
            conn.catch_up()  # a close the server sent after the last answer makes it unusable
            if conn.reusable:
                return conn
            self._discard(conn)
        return None

    async def open(self, endpoint: Endpoint) -> HttpConnection:
        """A new connection to ``endpoint``."""
        if self._kernel_stamps and not endpoint.tls:
            # Read at each open, not at import: the tests run both reads in one process.
            conn = HttpConnection(self._clock, keeps=socket_reads.NATIVE_READS)
            await open_stamped(endpoint.host, endpoint.port, conn, self._clock)
            self._open.add(conn)
            return conn
        loop = asyncio.get_running_loop()
        tls = self._ssl if endpoint.tls else None
        _, conn = await loop.create_connection(
            lambda: HttpConnection(self._clock),
            endpoint.host,
            endpoint.port,
            ssl=tls,
            server_hostname=endpoint.host if tls is not None else None,
        )
        self._open.add(conn)
        return conn

    @property
    def kernel_stamps(self) -> bool:
        """Whether plain-TCP reads carry the kernel's receive stamps (``stamped.py``)."""
        return self._kernel_stamps

    def release(self, endpoint: Endpoint, conn: HttpConnection) -> None:
        """Give ``conn`` back after its response: kept when it can serve another request, else closed."""
        if conn.reusable:
            self._idle.setdefault(endpoint, []).append(conn)
        else:
            self._discard(conn)

    def discard(self, conn: HttpConnection) -> None:
        """Close ``conn`` for good (its request failed or was given up)."""
        conn.detach()
        self._discard(conn)

    def _discard(self, conn: HttpConnection) -> None:
        conn.close()
        self._open.discard(conn)

    def close(self) -> None:
        """Close every connection, idle or busy."""
        for conn in list(self._open):
            conn.abort()
        self._open.clear()
        self._idle.clear()


class BodySink:
    """Collects a whole (small) response body: ``GET /v1/models`` and the like. A body longer than
    ``limit_bytes`` ends the response with ``ResponseTooLargeError`` (the caller discards the
    connection): a cut answer would only be misread."""

    def __init__(self, limit_bytes: int) -> None:
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.status = 0
        self.body = bytearray()
        self.error: HttpError | None = None
        self._limit = limit_bytes

    def on_headers(self, now: float, status: int, headers: dict[str, str]) -> None:
        self.status = status

    def on_read(self, now: float, body: bytes) -> None:
        if self.finished.done():
            return
        if len(self.body) + len(body) > self._limit:
            self.on_end(now, ResponseTooLargeError(f"response body longer than {self._limit} bytes"))
            self.body.clear()
            return
        self.body += body

    def on_end(self, now: float, error: HttpError | None) -> None:
        if not self.finished.done():  # else the body's bound ended it already
            self.error = error
            self.finished.set_result(None)

    def keep_mode(self, unkeep: Callable[[], None]) -> KeepMode | None:
        return None  # a small body: every read to on_read
