"""``Connector``: how a probe client reaches its target, the connections to one endpoint.

It holds the client's pool of keep-alive connections (``http.ConnectionPool``), opens a connection
within the time limits (the connect limit, and no longer than the request has left: ``Watchdog``), and
makes the client's small ``GET``s (``/v1/models``). What a request does on its connection is the
client's (``client.py``); this module only decides which connection and how long to wait for it.
"""

from __future__ import annotations

import asyncio
import math
import ssl
import time
from collections.abc import Callable, Mapping

from exporter.probe.http import BodySink, ConnectionPool, Endpoint, HttpConnection, HttpError, request_bytes
from exporter.probe.watchdog import Watchdog
from exporter.settings.target import TargetSettings
from exporter.streams.limits import MODELS_BODY_BYTES
from exporter.streams.result import Outcome


def ssl_context(settings: TargetSettings) -> ssl.SSLContext:
    """The TLS context of ``settings``' target: verified against its CA file, or not at all."""
    if not settings.verify_tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=settings.ca_file)


def connect_wait(connect: float | None, left: float) -> tuple[float | None, bool]:
    """How long opening a connection may wait (None: no limit of ours), given the connect limit
    ``connect`` and what the request has ``left``, and whether the request's own limit is the one
    that comes first (then its failure, not the connect's, ends a wait that runs out)."""
    request_limit = connect is None or left < connect
    wait = left if request_limit else connect
    return (wait if wait is not None and wait < math.inf else None), request_limit


class Connector:
    """The connections of one client to ``endpoint``: ``open`` before the first, ``close`` after the
    last (every connection, idle or busy, goes with it)."""

    def __init__(
        self,
        settings: TargetSettings,
        endpoint: Endpoint,
        headers: Mapping[str, str],
        *,
        clock: Callable[[], float] = time.perf_counter,
        kernel_stamps: bool = True,
    ) -> None:
        """``headers``: the client's request headers (a ``GET`` sends them without ``Content-Type``);
        ``kernel_stamps``: plain-TCP reads stamped by the kernel (``stamped.py``)."""
        self.endpoint = endpoint
        self._settings = settings  # its TLS and its connect limit
        self._clock = clock
        self._kernel_stamps = kernel_stamps
        self._get_headers = [(k, v) for k, v in headers.items() if k.lower() != "content-type"]
        self._pool: ConnectionPool | None = None

    def open(self) -> None:
        """Make the pool (once: opening an open connector changes nothing)."""
        if self._pool is None:
            tls = ssl_context(self._settings) if self.endpoint.tls else None
            self._pool = ConnectionPool(self._clock, tls, kernel_stamps=self._kernel_stamps)

    def close(self) -> None:
        """Close every connection and forget the pool (``open`` makes a new one)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    @property
    def pool(self) -> ConnectionPool:
        """The connection pool (only while open)."""
        if self._pool is None:
            raise RuntimeError("ProbeClient is not open: use it as `async with ProbeClient(...) as client`")
        return self._pool

    def release(self, conn: HttpConnection) -> None:
        """``conn``'s response ended: kept for another request when it can serve one, else closed."""
        if self._pool is None:
            self._closed_meanwhile(conn)
        else:
            self._pool.release(self.endpoint, conn)

    def discard(self, conn: HttpConnection) -> None:
        """Close ``conn`` for good (its request failed or was given up)."""
        if self._pool is None:
            self._closed_meanwhile(conn)
        else:
            self._pool.discard(conn)

    @staticmethod
    def _closed_meanwhile(conn: HttpConnection) -> None:
        # The client closed while this request was in flight: a command stopped by a signal, whose
        # event loop cancels the requests still running only after the client's ``async with`` has
        # closed the pool (and aborted this connection with it). Giving the request up is all that
        # is left; raising here printed a traceback after the command had said how it stopped.
        conn.detach()
        conn.close()

    async def get(self, path: str, limit_bytes: int = MODELS_BODY_BYTES) -> tuple[int, bytes]:
        """``GET {endpoint}{path}``: its status and body (see ``ProbeClient.get``)."""
        request = request_bytes("GET", self.endpoint, path, self._get_headers)
        conn, _ = await self.connect(fresh=False)
        sink = BodySink(limit_bytes)
        try:
            conn.start(request, sink)
            await sink.finished
        except BaseException:
            self.discard(conn)
            raise
        if sink.error is not None:
            self.discard(conn)
            raise sink.error
        self.release(conn)
        return sink.status, bytes(sink.body)

    async def connect(self, *, fresh: bool, watchdog: Watchdog | None = None) -> tuple[HttpConnection, bool]:
        """A connection and whether it was reused (``fresh``: always a new one). Opening one waits at
        most the connect limit, and no longer than ``watchdog``'s request has left: then its failure
        (a ``StreamFailureError``) is raised."""
        if not fresh and (conn := self.pool.reuse(self.endpoint)) is not None:
            return conn, True  # no timer for what takes no waiting
        connect = self._settings.timeouts.connect
        left, reason = watchdog.remaining() if watchdog is not None else (math.inf, Outcome.OK)
        wait, request_limit = connect_wait(connect, left)
        scope = asyncio.timeout(wait)
        try:
            async with scope:
                return await self.pool.open(self.endpoint), False
        except TimeoutError as exc:
            if not scope.expired():  # the system's own connect timeout (ETIMEDOUT), not a limit of ours
                raise self._cannot_connect(exc) from None
            if watchdog is not None and request_limit:
                raise watchdog.failure(reason) from None
            raise HttpError(f"connect timed out after {connect} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise self._cannot_connect(exc) from None

    def _cannot_connect(self, exc: Exception) -> HttpError:
        return HttpError(f"cannot connect to {self.endpoint.host}:{self.endpoint.port}: {exc}")
