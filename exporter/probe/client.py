"""``ProbeClient``: sends streaming requests to one target and stamps every token.

Network code only stamps times; ``reader.py``, ``stream.py`` and ``result.py`` give them meaning. The
transport is ``http.py``: raw ``asyncio.Protocol`` connections whose ``data_received`` stamps each socket
read first (every event decoded from that read shares the stamp) and hands the bytes to the request's
``StreamReader``, which decodes them on arrival only until the first token and in one go at the end of
the stream after that. ``sent_at`` is stamped just before a connection is taken (or opened) and the
request written, so TTFT includes connecting and writing the request, as a user's does, but not the
client's own lateness, which is ``send_overhead_s`` (``sent_at - scheduled_at``). The event loop is
whatever runs the caller: ``exporter.probe.loop`` starts uvloop's where the CLI and the daemon start one.

Target failures never raise: every one ends as an ``Outcome`` on the result, with whatever timings it
got. Cancellation always propagates (the tokens received so far are decoded into the result first). A
bug of ours (anything that is not a network, HTTP or stream failure) raises too, rather than hiding in a
failure count.

Timeouts (``TargetSettings.timeouts``), each its own outcome: ``connect`` (the TCP and TLS connect),
and, from one lazily re-armed timer per request (no timer work per read), ``ttft`` (request write to the
first token), ``idle`` (silence between reads once tokens flow) and ``total``.

A request that fails before any response byte on a *reused* keep-alive connection (the server closed it
while idle, as llama.cpp and uvicorn do after 5 s, or after its last allowed request, as llama.cpp
does after 5 per connection, and our write raced its FIN) is resent once on a fresh connection and
counted in ``retries``; on a fresh connection the same failure is a ``CONNECT_ERROR``. The resend opens
a new connection rather than taking one from the pool: under load several go stale at once.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import math
import secrets
import ssl
import time
from collections.abc import Callable
from http import HTTPStatus
from types import TracebackType

import msgspec

from exporter.probe.bounds import MODELS_BODY_BYTES
from exporter.probe.http import (
    BodySink,
    ConnectionPool,
    Endpoint,
    HttpConnection,
    HttpError,
    ResponseTooLargeError,
    request_bytes,
    request_head,
    with_body,
)
from exporter.probe.openai import FORMATS, ApiFormat, exact_length
from exporter.probe.reader import StreamReader, error_text
from exporter.probe.result import Outcome, ProbeResult
from exporter.probe.saturation import LagMonitor, doubtful_gaps, gaps_near_stalls, is_unreliable
from exporter.probe.socket_reads import reads_lateness
from exporter.probe.stream import StreamFailureError, StreamState
from exporter.probe.target import PROBE_HEADER, RequestSpec
from exporter.probe.tokens import TextCounter, TokenCounter, load_tokenizer
from exporter.probe.watchdog import Watchdog
from exporter.settings.target import TargetSettings, mask_secrets

log = logging.getLogger(__name__)
# A request's JSON body: msgspec writes a small body in a fraction of json.dumps' time, compact (an
# extra_body is checked to be JSON data when it is read, so both would write the same values).
_encode_json = msgspec.json.Encoder().encode


class TargetError(Exception):
    """A setup call to the target (``resolve_model``) failed; the message names the URL."""

    def __init__(self, outcome: Outcome, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.status = status

    def explain(self) -> str:
        """The failure as a user reads it: "did not answer" only when nothing answered (a 404 is an
        answer, and most often a wrong path in the URL)."""
        silent = self.outcome in (Outcome.CONNECT_ERROR, Outcome.TOTAL_TIMEOUT)
        return f"the target did not answer: {self}" if silent else f"the target {self}"


def _status_answer(url: str, status: int) -> str:
    """``GET url answered 404 Not Found``, with the likely cause of the statuses that have one."""
    try:
        phrase = f" {HTTPStatus(status).phrase}"
    except ValueError:
        phrase = ""
    hint = {
        404: ": is the URL's path right? (--url or targets[].url is the server's base, e.g. "
        "http://host:8000; /v1 is added when it is not there)",
        401: ": is the API key right? (--api-key-env, --api-key-file or targets[].api_key)",
        403: ": is the API key right? (--api-key-env, --api-key-file or targets[].api_key)",
    }.get(status, "")
    return f"answered GET {url} with {status}{phrase}{hint}"


class _StaleConnectionError(Exception):
    """Internal: the request failed before any response byte on a reused connection."""


def _api_root(base_url: str) -> str:
    root = base_url.rstrip("/")
    return root if root.endswith("/v1") else root + "/v1"


def _ssl_context(settings: TargetSettings) -> ssl.SSLContext:
    if not settings.verify_tls:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cafile=settings.ca_file)


class ProbeClient:
    """Sends streaming requests to one target; use as ``async with ProbeClient(settings) as client``."""

    def __init__(
        self,
        settings: TargetSettings,
        *,
        clock: Callable[[], float] = time.perf_counter,
        monitor_lag: bool = True,
        kernel_stamps: bool = True,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._kernel_stamps = kernel_stamps  # plain-TCP reads stamped by the kernel (stamped.py)
        self._pool: ConnectionPool | None = None
        self._format: ApiFormat = FORMATS[settings.api]
        self._endpoint = Endpoint.parse(_api_root(settings.base_url))  # its path ends in /v1
        self._path = self._format.path.removeprefix("/v1")
        self._url = _api_root(settings.base_url) + self._path
        self._headers = self._build_headers()
        self._post_head = request_head("POST", self._endpoint, self._path, self._headers.items())
        # Each request's own value of PROBE_HEADER: an id that an observer behind the same Envoy joins
        # its view of the request on (unique across clients and processes: a random prefix).
        self._probe_ids = (f"{secrets.token_hex(6)}-{n}" for n in itertools.count(1))
        self._model = settings.model
        self._model_lock = asyncio.Lock()
        self._text_counter: TextCounter | None = (
            load_tokenizer(settings.tokenizer_file) if settings.tokenizer_file else None
        )
        self.monitor: LagMonitor | None = LagMonitor(clock=clock) if monitor_lag else None
        self._in_flight = 0

    def __repr__(self) -> str:
        return f"ProbeClient(url={self._url!r}, api={self.settings.api!r}, model={self._model!r})"

    def _build_headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.settings.api_key is not None:
            headers["Authorization"] = f"Bearer {self.settings.api_key.reveal()}"
        # An explicit header wins, Authorization included; the framing headers and the probe mark are the
        # client's own.
        for name, value in self.settings.headers:
            for known in [k for k in headers if k.lower() == name.lower()]:
                del headers[known]
            framing = ("host", "content-length", "transfer-encoding", "accept-encoding", PROBE_HEADER.lower())
            if name.lower() not in framing:
                headers[name] = value
        return headers

    # -- lifecycle ---------------------------------------------------------------------------------

    async def __aenter__(self) -> ProbeClient:
        if self._pool is None:
            tls = _ssl_context(self.settings) if self._endpoint.tls else None
            self._pool = ConnectionPool(self._clock, tls, kernel_stamps=self._kernel_stamps)
        return self

    async def __aexit__(
        self, _type: type[BaseException] | None, _exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        if self.monitor is not None:
            self.monitor.stop()
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    @property
    def pool(self) -> ConnectionPool:
        """The connection pool (only inside ``async with``)."""
        if self._pool is None:
            raise RuntimeError("ProbeClient is not open: use it as `async with ProbeClient(...) as client`")
        return self._pool

    # -- the model -----------------------------------------------------------------------------------

    async def resolve_model(self) -> str:
        """The configured model, else the first model ``GET /v1/models`` lists (cached); raises
        ``TargetError`` when the target cannot say."""
        if self._model is not None:
            return self._model
        async with self._model_lock:  # one GET, however many requests wait for it
            if self._model is None:
                self._model = await self._fetch_model()
            return self._model

    async def _fetch_model(self) -> str:
        url = _api_root(self.settings.base_url) + "/models"
        limit = self.settings.timeouts.ttft or self.settings.timeouts.total
        try:
            async with asyncio.timeout(limit):
                status, body = await self.get("/models")
        except TimeoutError:  # before OSError, of which it is a subclass
            raise TargetError(Outcome.TOTAL_TIMEOUT, f"GET {url}: no answer within {limit} s") from None
        except ResponseTooLargeError as exc:
            raise TargetError(Outcome.TOO_LARGE, f"GET {url}: {exc}") from None
        except (HttpError, OSError) as exc:
            raise TargetError(Outcome.CONNECT_ERROR, f"GET {url}: {self._scrub(str(exc))}") from None
        if status != 200:
            raise TargetError(Outcome.HTTP_STATUS, _status_answer(url, status), status)
        try:
            return str(json.loads(body)["data"][0]["id"])
        except (ValueError, KeyError, IndexError, TypeError):
            raise TargetError(
                Outcome.MALFORMED_STREAM, f"answered GET {url} with no model listed in the answer"
            ) from None

    async def get(self, path: str, limit_bytes: int = MODELS_BODY_BYTES) -> tuple[int, bytes]:
        """``GET /v1{path}`` on the target: its status and body. Raises ``HttpError`` or ``OSError``
        when the exchange fails, ``ResponseTooLargeError`` (an ``HttpError``) when the body is over
        ``limit_bytes`` (the caller bounds its time)."""
        headers = [(k, v) for k, v in self._headers.items() if k.lower() != "content-type"]
        request = request_bytes("GET", self._endpoint, path, headers)
        conn, _ = await self._connect(fresh=False)
        sink = BodySink(limit_bytes)
        try:
            conn.start(request, sink)
            await sink.finished
        except BaseException:
            self.pool.discard(conn)
            raise
        if sink.error is not None:
            self.pool.discard(conn)
            raise sink.error
        self.pool.release(self._endpoint, conn)
        return sink.status, bytes(sink.body)

    async def _connect(self, *, fresh: bool, watchdog: Watchdog | None = None) -> tuple[HttpConnection, bool]:
        """A connection and whether it was reused (``fresh``: always a new one). Opening one waits at
        most the connect limit, and no longer than ``watchdog``'s request has left: then its failure
        (a ``StreamFailureError``) is raised."""
        if not fresh and (conn := self.pool.reuse(self._endpoint)) is not None:
            return conn, True  # no timer for what takes no waiting
        connect = self.settings.timeouts.connect
        left, reason = watchdog.remaining() if watchdog is not None else (math.inf, Outcome.OK)
        request_limit = connect is None or left < connect  # the request's own limit comes first
        wait = left if request_limit else connect
        scope = asyncio.timeout(wait if wait is not None and wait < math.inf else None)
        try:
            async with scope:
                return await self.pool.open(self._endpoint), False
        except TimeoutError as exc:
            if not scope.expired():  # the system's own connect timeout (ETIMEDOUT), not a limit of ours
                raise self._cannot_connect(exc) from None
            if watchdog is not None and request_limit:
                raise watchdog.failure(reason) from None
            raise HttpError(f"connect timed out after {connect} s") from None
        except (OSError, ssl.SSLError) as exc:
            raise self._cannot_connect(exc) from None

    def _cannot_connect(self, exc: Exception) -> HttpError:
        return HttpError(f"cannot connect to {self._endpoint.host}:{self._endpoint.port}: {exc}")

    # -- one request ---------------------------------------------------------------------------------

    async def send(
        self,
        spec: RequestSpec,
        scheduled_at: float | None = None,
        *,
        on_start: Callable[[ProbeResult], None] | None = None,
    ) -> ProbeResult:
        """Send ``spec`` and stream its answer; never raises for a failure of the target.

        ``on_start`` receives the result being filled in before anything is sent, so a caller that
        cancels the request (a capacity trial stopped early) can still count the tokens it received.
        """
        result = ProbeResult(
            api=self.settings.api,
            scheduled_at=scheduled_at,
            max_tokens=spec.max_tokens,
            prompt_tokens_intended=spec.prompt_tokens,
            session=spec.session or spec.request_id,
            turn=spec.turn,
        )
        if on_start is not None:
            on_start(result)
        if spec.request_id is not None:
            result.extra["request_id"] = spec.request_id
        try:
            model = await self.resolve_model()
        except TargetError as exc:
            return self._failed(result, exc.outcome, str(exc), exc.status)
        body = _encode_json(self._format.build_body(self.settings, spec, model))
        probe_id = next(self._probe_ids)
        result.extra["probe_id"] = probe_id
        request = with_body(self._post_head + f"{PROBE_HEADER}: {probe_id}\r\n".encode(), body)
        self._enter_flight()
        try:
            mark = self.monitor.mark() if self.monitor is not None else 0
            await self._send_with_retry(result, request, spec)
            self._judge(result, mark)
        finally:
            self._leave_flight()
        if result.error:  # also what the stream's parser said (an error event may quote the request)
            result.error = self._scrub(result.error)
        return result

    def _enter_flight(self) -> None:
        # The lag monitor runs only while requests are in flight: an idle daemon pays nothing for it.
        self._in_flight += 1
        if self._in_flight == 1 and self.monitor is not None:
            self.monitor.start()

    def _leave_flight(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0 and self.monitor is not None:
            self.monitor.stop()

    async def _send_with_retry(self, result: ProbeResult, request: bytes, spec: RequestSpec) -> None:
        try:
            await self._attempt(result, request, spec, fresh=False)
        except _StaleConnectionError:
            result.retries += 1
            await self._attempt(result, request, spec, fresh=True)

    def _judge(self, result: ProbeResult, mark: int) -> None:
        """Record the saturation evidence and apply the rule of ``saturation.py``."""
        if self.monitor is not None:
            result.loop_lag_s, result.loop_lag_share = self.monitor.since(mark)
            result.cpu_share = self.monitor.cpu_share_since(mark)
            if result.kernel_stamps and result.sent_at is not None:  # the stamped reads' own lateness, too
                result.loop_lag_s = max(result.loop_lag_s, reads_lateness(result.sent_at))
        reads = int(result.extra.get("token_reads", 0))
        result.unreliable = is_unreliable(
            result.loop_lag_s,
            result.loop_lag_share,
            result.multi_event_reads,
            reads,
            kernel_stamps=result.kernel_stamps,
            early_stamps=result.early_stamps,
        )
        result.doubtful_gaps = doubtful_gaps(
            result.unreliable,
            result.loop_lag_s,
            result.loop_lag_share,
            (result.multi_event_reads, result.merged_events),
            result.token_events,
            result.kernel_stamps,
            early_stamps=result.early_stamps,
            near_stalls=self._gaps_near_stalls(result, mark),
        )

    def _gaps_near_stalls(self, result: ProbeResult, mark: int) -> int | None:
        """The gaps a flagged request's stalls may have made wrong when its stamps were the loop's
        (``saturation.gaps_near_stalls``); None when unknown or not asked (kernel stamps: a late loop
        does not make a stamp late)."""
        if not result.unreliable or result.kernel_stamps or self.monitor is None:
            return None
        stalls = self.monitor.stalls_since(mark)
        if stalls is None:
            return None
        return gaps_near_stalls(sorted(result.token_times + result.reasoning_times), stalls) if stalls else 0

    def _failed(
        self, result: ProbeResult, outcome: Outcome, message: str, status: int | None = None
    ) -> ProbeResult:
        result.outcome = outcome
        result.error = self._scrub(message)
        if status is not None:
            result.http_status = status
        if result.finished_at is None:
            result.finished_at = self._clock()
        return result

    def _scrub(self, text: str) -> str:
        return mask_secrets(text, self.settings.secret_texts())

    async def _attempt(self, result: ProbeResult, request: bytes, spec: RequestSpec, *, fresh: bool) -> None:
        state = StreamState(
            result,
            self._format,
            TokenCounter(self._text_counter),
            exact_length=exact_length(self.settings, spec),
            keep_text=spec.keep_text,
        )
        result.sent_at = sent = self._clock()
        if result.scheduled_at is not None:
            result.send_overhead_s = sent - result.scheduled_at
        watchdog = Watchdog(self.settings.timeouts, self._clock, sent, state)
        try:
            await self._exchange(result, request, state, watchdog, fresh=fresh)
        except StreamFailureError as exc:  # the stream's own failure, or a time limit (watchdog.py)
            self._failed(result, exc.outcome, exc.message)
            exc.__traceback__ = None  # its frames hold the reader, which holds it: a cycle for the GC
        finally:
            watchdog.cancel()
        result.extra["token_reads"] = state.token_reads

    async def _exchange(
        self, result: ProbeResult, request: bytes, state: StreamState, watchdog: Watchdog, *, fresh: bool
    ) -> None:
        try:
            conn, reused = await self._connect(fresh=fresh, watchdog=watchdog)
        except HttpError as exc:
            self._failed(result, Outcome.CONNECT_ERROR, str(exc))
            return
        result.kernel_stamps = conn.kernel_stamped
        early = conn.early_stamps()
        reader = StreamReader(state, self.settings.max_line_bytes, on_first_token=watchdog.rearm)
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
            self.pool.discard(conn)
            raise
        result.early_stamps += conn.early_stamps() - early  # before _settle: a discarded socket forgets
        self._settle(result, state, reader, conn, reused=reused and not fresh)

    def _settle(
        self,
        result: ProbeResult,
        state: StreamState,
        reader: StreamReader,
        conn: HttpConnection,
        *,
        reused: bool,
    ) -> None:
        failure = reader.failure
        if reader.body_complete and failure is None:
            self.pool.release(self._endpoint, conn)
        else:
            self.pool.discard(conn)
        if failure is None:
            state.finish()
        elif isinstance(failure, StreamFailureError):
            raise failure
        elif not reader.headers_received and not conn.bytes_received and reused:
            raise _StaleConnectionError(str(failure))
        else:
            self._failed(result, _http_failure(failure, headers=reader.headers_received), str(failure))


def _http_failure(failure: HttpError, *, headers: bool) -> Outcome:
    """The outcome of a request whose connection failed, given whether its headers had come."""
    if isinstance(failure, ResponseTooLargeError):
        return Outcome.TOO_LARGE
    return Outcome.STREAM_ABORTED if headers else Outcome.CONNECT_ERROR


__all__ = ["ProbeClient", "TargetError", "error_text"]
