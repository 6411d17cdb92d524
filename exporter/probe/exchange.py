"""``Exchange``: one try of a request, from taking a connection to what the end of its stream says.

The client (``client.py``) builds a request once and tries it (twice at most: a stale keep-alive
connection earns one resend); each try is an ``Exchange``: it stamps ``sent_at``, takes a connection
(``connector.py``), writes the request, lets the request's ``StreamReader`` take the response under
the ``Watchdog``'s limits, gives the connection back or closes it, and settles the stream. A failure
of the target comes back as the (outcome, message) ``run`` returns, whether the connection, HTTP or
the stream failed or a time limit passed; a request that failed before any response byte on a reused
connection raises ``StaleConnectionError`` instead (the client resends it on a fresh connection), and
cancellation propagates.
"""

from __future__ import annotations

from collections.abc import Callable

from exporter.probe.connector import Connector
from exporter.probe.http import HttpConnection, HttpError, ResponseTooLargeError
from exporter.probe.stream_reader import StreamReader
from exporter.probe.watchdog import Watchdog
from exporter.settings.target import TargetSettings
from exporter.streams.decoder import StreamFailureError, StreamState
from exporter.streams.result import Outcome

Failure = tuple[Outcome, str]  # a failure of the connection or of HTTP, and its message


class StaleConnectionError(Exception):
    """The request failed before any response byte on a reused connection."""


class Exchange:
    """One try of one request (``run`` it once) into ``state``, on a connection of ``connector``, within
    the time limits of ``settings``."""

    def __init__(
        self, connector: Connector, settings: TargetSettings, state: StreamState, clock: Callable[[], float]
    ) -> None:
        self._connector = connector
        self._settings = settings
        self._state = state
        self._clock = clock

    async def run(self, request: bytes, *, fresh: bool) -> Failure | None:
        """Send ``request`` (``fresh``: on a new connection) and read its response; the failure of the
        target that ended it, if one did."""
        result = self._state.result
        result.sent_at = sent = self._clock()
        if result.scheduled_at is not None:
            result.send_overhead_s = sent - result.scheduled_at
        watchdog = Watchdog(self._settings.timeouts, self._clock, sent, self._state)
        try:
            failure = await self._exchange(request, watchdog, fresh=fresh)
        except StreamFailureError as exc:  # the stream's own failure, or a time limit (watchdog.py)
            exc.__traceback__ = None  # its frames hold the reader, which holds it: a cycle for the GC
            failure = exc.outcome, exc.message
        finally:
            watchdog.cancel()
        result.extra["token_reads"] = self._state.token_reads
        return failure

    async def _exchange(self, request: bytes, watchdog: Watchdog, *, fresh: bool) -> Failure | None:
        result = self._state.result
        try:
            conn, reused = await self._connector.connect(fresh=fresh, watchdog=watchdog)
        except HttpError as exc:
            return Outcome.CONNECT_ERROR, str(exc)
        result.kernel_stamps = conn.kernel_stamped
        early = conn.early_stamps()
        reader = StreamReader(self._state, self._settings.max_line_bytes, on_first_token=watchdog.rearm)
        watchdog.start(reader.expire)
        try:
            try:
                if not reader.finished.done():  # else a limit passed while connecting
                    conn.start(request, reader)
            except HttpError as exc:  # closed between the pool's check and the write
                reader.on_end(self._clock(), exc)
            await reader.finished
        except BaseException:
            reader.flush_quietly()  # given up (cancelled, timed out): the tokens received still count
            result.early_stamps += conn.early_stamps() - early
            self._connector.discard(conn)
            raise
        result.early_stamps += conn.early_stamps() - early  # before _settle: a discarded socket forgets
        return self._settle(reader, conn, reused=reused and not fresh)

    def _settle(self, reader: StreamReader, conn: HttpConnection, *, reused: bool) -> Failure | None:
        """The response ended: keep or close ``conn``, and finish the stream or say how it failed."""
        failure = reader.failure
        if reader.body_complete and failure is None:
            self._connector.release(conn)
        else:
            self._connector.discard(conn)
        if failure is None:
            self._state.finish()
            return None
        if isinstance(failure, StreamFailureError):
            raise failure
        if not reader.headers_received and not conn.bytes_received and reused:
            raise StaleConnectionError(str(failure))
        return http_failure(failure, headers=reader.headers_received), str(failure)


def http_failure(failure: HttpError, *, headers: bool) -> Outcome:
    """The outcome of a request whose connection failed, given whether its headers had come."""
    if isinstance(failure, ResponseTooLargeError):
        return Outcome.TOO_LARGE
    return Outcome.STREAM_ABORTED if headers else Outcome.CONNECT_ERROR
