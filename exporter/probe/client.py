"""``ProbeClient``: one aiohttp session that sends streaming requests and stamps every token.

Network code only stamps times; ``stream.py`` and ``result.py`` give them meaning. The hot path is one
``resp.content.readany()`` per socket read, one clock read per read (all events decoded from that read
share it), and the incremental SSE decoder. ``sent_at`` is stamped just before ``session.post``, so TTFT
includes connecting and writing the request, as a user's does, but not the client's own lateness, which
is ``send_overhead_s`` (``sent_at - scheduled_at``).

Target failures never raise: every one ends as an ``Outcome`` on the result, with whatever timings it
got. Cancellation always propagates. A bug of ours (anything that is not a network, HTTP or stream
failure) raises too, rather than hiding in a failure count.

Timeouts (``TargetSettings.timeouts``), each its own outcome: ``connect`` (the TCP connect, by aiohttp),
and, from one lazily re-armed timer per request (no timer work per read), ``ttft`` (request write to the
first token), ``idle`` (silence between reads once tokens flow) and ``total``.

A request that fails before any response byte on a *reused* keep-alive connection (the server closed it
while idle, as llama.cpp and uvicorn do after 5 s, or after its last allowed request, as llama.cpp
does after 5 per connection, and our write raced its FIN) is resent once on a fresh connection and
counted in ``retries``; on a fresh connection the same failure is a ``CONNECT_ERROR``. The resend goes
through a second session that opens a new connection for every request: taken from the pool, it could
meet the next stale connection (under load several go stale at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import ssl
import time
from collections.abc import Callable
from types import SimpleNamespace, TracebackType
from typing import Any

import aiohttp

from exporter.probe.openai import FORMATS, ApiFormat
from exporter.probe.result import Outcome, ProbeResult
from exporter.probe.saturation import LagMonitor, is_unreliable
from exporter.probe.sse import SseDecoder, SseError
from exporter.probe.stream import StreamFailureError, StreamState
from exporter.probe.target import RequestSpec, TargetSettings
from exporter.probe.tokens import TextCounter, TokenCounter, load_tokenizer
from exporter.probe.watchdog import Watchdog

log = logging.getLogger(__name__)

# Hundreds of concurrent streams are the point; aiohttp's default pool of 100 would queue them unseen.
MAX_CONNECTIONS = 4096
ERROR_BODY_LIMIT = 4096
DRAIN_LIMIT_S = 1.0  # after [DONE], how long to wait for the end of the HTTP body
_STALE_ERRORS = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)


class TargetError(Exception):
    """A setup call to the target (``resolve_model``) failed; the message names the URL."""

    def __init__(self, outcome: Outcome, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.status = status


class _StaleConnectionError(Exception):
    """Internal: the request failed before any response byte on a reused connection."""


def _api_root(base_url: str) -> str:
    root = base_url.rstrip("/")
    return root if root.endswith("/v1") else root + "/v1"


def _ssl_setting(settings: TargetSettings) -> ssl.SSLContext | bool:
    if not settings.verify_tls:
        return False
    if settings.ca_file is not None:
        return ssl.create_default_context(cafile=settings.ca_file)
    return True


async def _on_reuse(_session: Any, trace: SimpleNamespace, _params: Any) -> None:
    ctx = trace.trace_request_ctx
    if ctx is not None:
        ctx.reused = True


def _trace_config() -> aiohttp.TraceConfig:
    config = aiohttp.TraceConfig()
    config.on_connection_reuseconn.append(_on_reuse)
    return config


class ProbeClient:
    """Sends streaming requests to one target; use as ``async with ProbeClient(settings) as client``."""

    def __init__(
        self,
        settings: TargetSettings,
        *,
        session: aiohttp.ClientSession | None = None,
        clock: Callable[[], float] = time.perf_counter,
        monitor_lag: bool = True,
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._session = session
        self._owns_session = session is None
        self._fresh_session: aiohttp.ClientSession | None = None  # for resends; opened on first use
        self._format: ApiFormat = FORMATS[settings.api]
        self._url = _api_root(settings.base_url) + self._format.path.removeprefix("/v1")
        self._headers = self._build_headers()
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
        headers.update(self.settings.headers)  # an explicit header wins, Authorization included
        return headers

    # -- lifecycle ---------------------------------------------------------------------------------

    async def __aenter__(self) -> ProbeClient:
        if self._session is None:
            self._session = self._new_session(force_close=False)
        return self

    def _new_session(self, *, force_close: bool) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(
            limit=MAX_CONNECTIONS, limit_per_host=0, ssl=_ssl_setting(self.settings), force_close=force_close
        )
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.settings.timeouts.connect)
        return aiohttp.ClientSession(connector=connector, timeout=timeout, trace_configs=[_trace_config()])

    async def __aexit__(
        self, _type: type[BaseException] | None, _exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        if self.monitor is not None:
            self.monitor.stop()
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None
        if self._fresh_session is not None:
            await self._fresh_session.close()
            self._fresh_session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        """The one session (only inside ``async with``)."""
        if self._session is None:
            raise RuntimeError("ProbeClient is not open: use it as `async with ProbeClient(...) as client`")
        return self._session

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
            async with asyncio.timeout(limit), self.session.get(url, headers=self._headers) as resp:
                body = await resp.read()
                status = resp.status
        except TimeoutError:  # before OSError, of which it is a subclass
            raise TargetError(Outcome.TOTAL_TIMEOUT, f"GET {url}: no answer within {limit} s") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise TargetError(Outcome.CONNECT_ERROR, f"GET {url}: {self._scrub(str(exc))}") from None
        if status != 200:
            raise TargetError(Outcome.HTTP_STATUS, f"GET {url}: HTTP {status}", status)
        try:
            return str(json.loads(body)["data"][0]["id"])
        except (ValueError, KeyError, IndexError, TypeError):
            raise TargetError(Outcome.MALFORMED_STREAM, f"GET {url}: no model listed in the answer") from None

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
        )
        if on_start is not None:
            on_start(result)
        if spec.request_id is not None:
            result.extra["request_id"] = spec.request_id
        try:
            model = await self.resolve_model()
        except TargetError as exc:
            return self._failed(result, exc.outcome, str(exc), exc.status)
        body = json.dumps(self._format.build_body(self.settings, spec, model)).encode()
        self._enter_flight()
        try:
            mark = self.monitor.mark() if self.monitor is not None else 0
            cpu_start, wall_start = time.process_time(), self._clock()
            await self._send_with_retry(result, body)
            self._judge(result, mark, cpu_start, wall_start)
        finally:
            self._leave_flight()
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

    async def _send_with_retry(self, result: ProbeResult, body: bytes) -> None:
        try:
            await self._attempt(result, body, self.session, retry_allowed=True)
        except _StaleConnectionError:
            result.retries += 1
            if self._fresh_session is None:
                self._fresh_session = self._new_session(force_close=True)
            await self._attempt(result, body, self._fresh_session, retry_allowed=False)

    def _judge(self, result: ProbeResult, mark: int, cpu_start: float, wall_start: float) -> None:
        """Record the saturation evidence and apply the rule of ``saturation.py``."""
        wall = self._clock() - wall_start
        if wall > 0:
            result.cpu_share = min((time.process_time() - cpu_start) / wall, 1.0)
        if self.monitor is not None:
            result.loop_lag_s, result.loop_lag_share = self.monitor.since(mark)
        reads = int(result.extra.get("token_reads", 0))
        result.unreliable = is_unreliable(
            result.loop_lag_s, result.loop_lag_share, result.multi_event_reads, reads
        )

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
        key = self.settings.api_key
        return text.replace(key.reveal(), "********") if key is not None else text

    async def _attempt(
        self, result: ProbeResult, body: bytes, session: aiohttp.ClientSession, *, retry_allowed: bool
    ) -> None:
        state = StreamState(result, self._format, TokenCounter(self._text_counter))
        result.sent_at = sent = self._clock()
        if result.scheduled_at is not None:
            result.send_overhead_s = sent - result.scheduled_at
        watchdog = Watchdog(self.settings.timeouts, self._clock, sent, state)
        try:
            async with asyncio.timeout(None) as scope:
                watchdog.start(scope)
                try:
                    await self._exchange(result, body, state, session, retry_allowed=retry_allowed)
                finally:
                    watchdog.cancel()
        except TimeoutError:
            if watchdog.expired is None:
                raise  # not ours: someone else's timeout around send()
            limit = {
                Outcome.TTFT_TIMEOUT: self.settings.timeouts.ttft,
                Outcome.IDLE_TIMEOUT: self.settings.timeouts.idle,
                Outcome.TOTAL_TIMEOUT: self.settings.timeouts.total,
            }[watchdog.expired]
            self._failed(result, watchdog.expired, f"{watchdog.expired.value} after {limit} s")
        except StreamFailureError as exc:
            self._failed(result, exc.outcome, exc.message)
        result.extra["token_reads"] = state.token_reads

    async def _exchange(
        self,
        result: ProbeResult,
        body: bytes,
        state: StreamState,
        session: aiohttp.ClientSession,
        *,
        retry_allowed: bool,
    ) -> None:
        trace = SimpleNamespace(reused=not self._owns_session)  # a foreign session: assume reuse
        try:
            async with session.post(
                self._url, data=body, headers=self._headers, trace_request_ctx=trace
            ) as resp:
                result.headers_at = self._clock()
                result.http_status = resp.status
                await self._check_response(resp)
                await self._read_stream(resp, state)
        except _STALE_ERRORS as exc:
            if result.headers_at is None and trace.reused and retry_allowed:
                raise _StaleConnectionError from exc
            self._network_failure(result, exc)
        except aiohttp.ClientError as exc:
            self._network_failure(result, exc)
        except OSError as exc:  # raw socket errors aiohttp did not wrap
            self._network_failure(result, exc)

    def _network_failure(self, result: ProbeResult, exc: BaseException) -> None:
        if result.headers_at is None or isinstance(exc, aiohttp.ClientConnectorError):
            outcome = Outcome.CONNECT_ERROR
        else:
            outcome = Outcome.STREAM_ABORTED
        self._failed(result, outcome, f"{type(exc).__name__}: {exc}")

    async def _check_response(self, resp: aiohttp.ClientResponse) -> None:
        if resp.status != 200:
            raw = await resp.content.read(ERROR_BODY_LIMIT)
            outcome = Outcome.RATE_LIMITED if resp.status == 429 else Outcome.HTTP_STATUS
            raise StreamFailureError(outcome, f"HTTP {resp.status}: {_error_text(raw)}")
        if resp.content_type != "text/event-stream":
            raise StreamFailureError(
                Outcome.MALFORMED_STREAM, f"expected Content-Type text/event-stream, got {resp.content_type}"
            )

    async def _read_stream(self, resp: aiohttp.ClientResponse, state: StreamState) -> None:
        decoder = SseDecoder(self.settings.max_line_bytes)
        clock, reader = self._clock, resp.content
        try:
            while data := await reader.readany():
                now = state.last_read = clock()
                events = decoder.feed(data)
                if events and state.on_events(now, events):
                    break
        except SseError as exc:
            raise StreamFailureError(Outcome.MALFORMED_STREAM, str(exc)) from None
        result = state.result
        if not state.done:
            result.finished_at = clock()
            if result.finish_reason is None or decoder.pending:
                raise StreamFailureError(Outcome.STREAM_ABORTED, "the stream ended before [DONE]")
        else:
            # Read the end of the HTTP body so the connection goes back to the pool for reuse; a server
            # that never ends it costs its connection, not the request.
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with asyncio.timeout(DRAIN_LIMIT_S):
                    while await reader.readany():
                        pass
        state.finish(exact_length=self.settings.ignore_eos or self.settings.send_min_tokens)


def _error_text(raw: bytes) -> str:
    """OpenAI's ``error.message`` when the body has one, else the start of the body."""
    text = raw.decode("utf-8", errors="replace")
    with contextlib.suppress(ValueError, KeyError, IndexError, AttributeError, TypeError):
        error = json.loads(text)["error"]
        return str(error["message"] if isinstance(error, dict) else error)[:200]
    return text[:200].strip() or "(empty body)"
