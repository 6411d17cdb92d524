"""``ProbeClient``: sends streaming requests to one target and stamps every token.

Network code only stamps times; ``stream_reader.py``, ``stream.py`` and ``result.py`` give them meaning. The
transport is ``http.py``: raw ``asyncio.Protocol`` connections whose ``data_received`` stamps each socket
read first (every event decoded from that read shares the stamp) and hands the bytes to the request's
``StreamReader``, which decodes them on arrival only until the first token and in one go at the end of
the stream after that. ``sent_at`` is stamped just before a connection is taken (or opened) and the
request written, so TTFT includes connecting and writing the request, as a user's does, but not the
client's own lateness, which is ``send_overhead_s`` (``sent_at - scheduled_at``). The event loop is
whatever runs the caller: ``exporter.probe.loop`` starts uvloop's where the CLI and the daemon start one.

The client builds each request and owns its result; the rest is in the modules beside it: the
connections to the target and the wait for one (``connector.py``), one try of a request on one of them
(``exchange.py``), the model the requests name (``models.py``) and the saturation verdict on a finished
request (``judge.py``).

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

import itertools
import logging
import secrets
import time
from collections.abc import Callable
from types import TracebackType

import msgspec

from exporter.probe.connector import Connector
from exporter.probe.exchange import Exchange, StaleConnectionError
from exporter.probe.http import (
    ConnectionPool,
    Endpoint,
    request_head,
    with_body,
)
from exporter.probe.judge import judge
from exporter.probe.models import TargetError, TargetModel
from exporter.probe.socket_reads import PACED_READS
from exporter.probe.stream_reader import error_text
from exporter.settings.target import TargetSettings, mask_secrets
from exporter.streams.decoder import StreamState
from exporter.streams.limits import MODELS_BODY_BYTES
from exporter.streams.openai import FORMATS, ApiFormat, exact_length
from exporter.streams.request import PROBE_HEADER, RequestSpec
from exporter.streams.result import Outcome, ProbeResult
from exporter.streams.saturation import LagMonitor
from exporter.streams.tokens import TextCounter, TokenCounter, load_tokenizer

log = logging.getLogger(__name__)
# A request's JSON body: msgspec writes a small body in a fraction of json.dumps' time, compact (an
# extra_body is checked to be JSON data when it is read, so both would write the same values).
_encode_json = msgspec.json.Encoder().encode


def _api_root(settings: TargetSettings) -> str:
    """Where the OpenAI routes are: ``/v1`` below the server's root (``TargetSettings.base_url`` is the
    root by the one rule for a target's URL)."""
    return settings.base_url + "/v1"


def request_headers(settings: TargetSettings) -> dict[str, str]:
    """The headers of every request to ``settings``' target, but the framing ones and the probe mark."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if settings.api_key is not None:
        headers["Authorization"] = f"Bearer {settings.api_key.reveal()}"
    # An explicit header wins, Authorization included; the framing headers and the probe mark are the
    # client's own.
    for name, value in settings.headers:
        for known in [k for k in headers if k.lower() == name.lower()]:
            del headers[known]
        framing = ("host", "content-length", "transfer-encoding", "accept-encoding", PROBE_HEADER.lower())
        if name.lower() not in framing:
            headers[name] = value
    return headers


def _new_result(settings: TargetSettings, spec: RequestSpec, scheduled_at: float | None) -> ProbeResult:
    """The result of sending ``spec`` to ``settings``' target, before anything is sent."""
    result = ProbeResult(
        api=settings.api,
        scheduled_at=scheduled_at,
        max_tokens=spec.max_tokens,
        prompt_tokens_intended=spec.prompt_tokens,
        session=spec.session or spec.request_id,
        turn=spec.turn,
    )
    if spec.request_id is not None:
        result.extra["request_id"] = spec.request_id
    return result


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
        self._format: ApiFormat = FORMATS[settings.api]
        endpoint = Endpoint.parse(_api_root(settings))  # its path ends in /v1
        path = self._format.path.removeprefix("/v1")
        self._url = _api_root(settings) + path
        headers = request_headers(settings)
        self._post_head = request_head("POST", endpoint, path, headers.items())
        self._connector = Connector(settings, endpoint, headers, clock=clock, kernel_stamps=kernel_stamps)
        # Each request's own value of PROBE_HEADER: an id that an observer behind the same Envoy joins
        # its view of the request on (unique across clients and processes: a random prefix).
        self._probe_ids = (f"{secrets.token_hex(6)}-{n}" for n in itertools.count(1))
        self._model = TargetModel(settings, self._connector, _api_root(settings) + "/models")
        self._text_counter: TextCounter | None = (
            load_tokenizer(settings.tokenizer_file) if settings.tokenizer_file else None
        )
        self.monitor: LagMonitor | None = LagMonitor(clock=clock, pace=PACED_READS) if monitor_lag else None
        self._in_flight = 0

    def __repr__(self) -> str:
        return f"ProbeClient(url={self._url!r}, api={self.settings.api!r}, model={self._model.name!r})"

    # -- lifecycle ---------------------------------------------------------------------------------

    async def __aenter__(self) -> ProbeClient:
        self._connector.open()
        return self

    async def __aexit__(
        self, _type: type[BaseException] | None, _exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        if self.monitor is not None:
            self.monitor.stop()
        self._connector.close()

    @property
    def pool(self) -> ConnectionPool:
        """The connection pool (only inside ``async with``)."""
        return self._connector.pool

    # -- the model -----------------------------------------------------------------------------------

    async def resolve_model(self) -> str:
        """The configured model, else the first model ``GET /v1/models`` lists (cached); raises
        ``TargetError`` when the target cannot say."""
        return await self._model.resolve()

    async def get(self, path: str, limit_bytes: int = MODELS_BODY_BYTES) -> tuple[int, bytes]:
        """``GET /v1{path}`` on the target: its status and body. Raises ``HttpError`` or ``OSError``
        when the exchange fails, ``ResponseTooLargeError`` (an ``HttpError``) when the body is over
        ``limit_bytes`` (the caller bounds its time)."""
        return await self._connector.get(path, limit_bytes)

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
        result = _new_result(self.settings, spec, scheduled_at)
        if on_start is not None:
            on_start(result)
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
            judge(result, self.monitor, mark)
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
        except StaleConnectionError:
            result.retries += 1
            await self._attempt(result, request, spec, fresh=True)

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
        exchange = Exchange(self._connector, self.settings, state, self._clock)
        if (failure := await exchange.run(request, fresh=fresh)) is not None:
            self._failed(result, *failure)


__all__ = ["ProbeClient", "TargetError", "error_text"]
