"""One observed HTTP exchange, from the stamped messages Envoy sent about it to a ``ProbeResult``: the
same record a probe writes, decoded by the probe's own decoder (``streams.sse``'s ``SseDecoder`` and
``streams.decoder``'s ``StreamState``, with its chunk shapes and token counting), so a user's stream and a
probe's are measured by one definition.

The observer's gRPC handler only stamps each message and hands it here. Response chunks are kept as
(stamp, bytes) and decoded in batches (``DECODE_BYTES``), each with its own arrival stamp, so the bytes a
stream holds stay bounded whatever its length. What a record may cost is bounded (``StreamLimits``): a
request body past its bound is not read (model ``other``), a stream past its bytes or token events is
given up (``Ignored.TOO_LARGE``). The client's bounds end a record as they end a probe, with its
outcome, at once, however long the user goes on reading: more token events than ``max_tokens`` and its
margin (``OVERLONG``), an SSE line or event past its bound (``TOO_LARGE``). No prompt or answer text is
kept once decoded, nor a failure's message (a server's error event may quote the request): the outcome
says how it ended.

The exporter's own probes (``streams.request.PROBE_HEADER``, whose value is the probe request's id) are
recorded the same way, with that id (``Observed.probe_id``), so that the daemon can compare the
observer's view of each probe with the client's own stamps; they never join the users' figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from enum import StrEnum

import msgspec

from exporter.settings.target import Api
from exporter.streams.decoder import StreamFailureError, StreamState, sse_failure
from exporter.streams.openai import FORMATS
from exporter.streams.request import PROBE_HEADER
from exporter.streams.result import Outcome, ProbeResult
from exporter.streams.saturation import ReadEvidence, is_unreliable
from exporter.streams.sse import SseDecoder, SseError
from exporter.streams.tokens import TokenCounter

OTHER_MODEL = "other"
# The paths of the streaming APIs the probe speaks; anything else passes unobserved (counted).
API_BY_PATH: Mapping[str, Api] = {fmt.path: api for api, fmt in FORMATS.items()}
MODELS_PATH = "/v1/models"  # the engine's list of the models it serves: read as it passes (model labels)
_PROBE_KEY = PROBE_HEADER.lower()  # Envoy sends header names lower-cased
DECODE_BYTES = 64 * 1024  # kept response bytes decoded at once: a batch, not a call per chunk


class Ignored(StrEnum):
    """Why an exchange gave no record (counted, by reason)."""

    NOT_LLM = "not_llm"  # another route: not one of the streaming APIs
    NOT_STREAMING = "not_streaming"  # an API request without "stream": true
    TOO_LARGE = "too_large"  # past the bytes or token events a stream may cost
    INCOMPLETE = "incomplete"  # the observer saw the exchange end before its response began


OVER_CAPACITY = "over_capacity"  # a stream refused: the observer's streams in flight were at their cap
ERROR = "error"  # a bug of ours while observing a stream (logged with its traceback)
SKIP_REASONS = (*(reason.value for reason in Ignored), OVER_CAPACITY, ERROR)
"""Every reason a stream leaves no record, as counted (the label's values, all exported from the start)."""


class StreamEnd(StrEnum):
    """How an ext_proc stream ended, for the observer's health (each stream counted once)."""

    OBSERVED = "observed"  # a user's record, its timings trusted
    UNRELIABLE = "unreliable"  # a user's record whose stamps the observer's late loop may have made wrong
    PROBE = "probe"  # the exporter's own probe, compared with the client's stamps
    NOT_LLM = "not_llm"
    NOT_STREAMING = "not_streaming"
    DROPPED = "dropped"  # no record: too large, incomplete, over capacity or our error (skipped says which)


@dataclass(frozen=True)
class StreamLimits:
    """What one stream may cost the observer."""

    request_body_bytes: int = 1024 * 1024  # enough for the model and max_tokens of any normal request
    response_bytes: int = 64 * 1024 * 1024
    token_events: int = 100_000
    max_line_bytes: int = 4 * 1024 * 1024  # the probe's SSE line bound
    models_body_bytes: int = 64 * 1024  # a /v1/models answer longer than this is not read


MAX_PROBE_ID = 128  # a probe id longer than this is not the exporter's: the stream is a user's


@dataclass(frozen=True)
class Observed:
    """A finished record: the probe's result type, the bounded label of its model, the length of its
    request body (what an unreported prompt length is estimated from) and, for the exporter's own
    probes, the probe request's id."""

    result: ProbeResult
    model: str
    request_bytes: int = 0
    probe_id: str | None = None


def _header_map(headers: Sequence[tuple[str, bytes]]) -> dict[str, str]:
    return {key: value.decode("latin-1") for key, value in headers}


@dataclass(frozen=True)
class RequestFacts:
    """What the request body says that the record needs (the rest of it is dropped at once)."""

    model: str | None = None
    stream: bool = False
    max_tokens: int | None = None


class _Body(msgspec.Struct):
    model: object = None
    stream: object = None
    max_tokens: object = None
    max_completion_tokens: object = None
    max_output_tokens: object = None


def request_facts(body: bytes) -> RequestFacts:
    """The model, ``stream`` and the token limit of a request body (JSON); empty facts when it is not."""
    try:
        parsed = msgspec.json.decode(body, type=_Body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return RequestFacts()
    limit = next(
        (
            v
            for v in (parsed.max_tokens, parsed.max_completion_tokens, parsed.max_output_tokens)
            if isinstance(v, int)
        ),
        None,
    )
    model = parsed.model if isinstance(parsed.model, str) else None
    return RequestFacts(model, parsed.stream is True, limit if not isinstance(limit, bool) else None)


class _ModelList(msgspec.Struct):
    data: list[dict[str, object]] = []


def listed_models(body: bytes) -> tuple[str, ...]:
    """The model ids of a ``GET /v1/models`` answer (``{"data": [{"id": ...}]}``); none when it is not one."""
    try:
        listing = msgspec.json.decode(body, type=_ModelList)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ()
    ids = (entry.get("id") for entry in listing.data)
    return tuple(dict.fromkeys(i for i in ids if isinstance(i, str) and i))


class _RequestBody:
    """A request body as it arrives: at most ``limit`` bytes of it kept, read once it ends."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._kept = bytearray()
        self.length = 0  # every byte of it, kept or not
        self.ended_at: float | None = None
        self.facts = RequestFacts()

    def add(self, now: float, body: bytes, end: bool) -> None:
        self.length += len(body)
        if len(self._kept) + len(body) <= self._limit:
            self._kept += body
        else:
            self._kept = bytearray(b"{}")  # not read: the model is "other", no token limit
        if end:
            self.ended_at = now
            self.facts = request_facts(bytes(self._kept))
            self._kept = bytearray()


class _ModelListing:
    """A ``GET /v1/models`` answer being read, at most ``limit`` bytes of it."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._body = bytearray()

    def add(self, body: bytes, end: bool) -> tuple[str, ...] | None:
        """The models listed once the answer ended (none past the bound); ``None`` while it goes on."""
        self._body += body
        if len(self._body) > self._limit:
            return ()
        return listed_models(bytes(self._body)) if end else None


class _Response:
    """A streamed response, its headers seen: its chunks kept as (stamp, bytes) and decoded in batches
    into the probe's ``StreamState``, the failure that ends it, and the record it sums up to."""

    # Slots: ``add`` runs on every body chunk of every observed stream.
    __slots__ = ("_decoder", "_kept", "_kept_bytes", "_limits", "_response_bytes", "failure", "state")

    def __init__(self, state: StreamState, limits: StreamLimits, failure: StreamFailureError | None) -> None:
        self.state = state
        self.failure = failure
        self._limits = limits
        self._decoder = SseDecoder(limits.max_line_bytes)
        self._kept: list[tuple[float, bytes]] = []
        self._kept_bytes = 0
        self._response_bytes = 0

    def add(self, now: float, body: bytes) -> bool:
        """Keep a chunk, decoding the kept ones once they reach ``DECODE_BYTES``; whether the stream is
        still within its bounds (bytes and token events)."""
        self._response_bytes += len(body)
        if self._response_bytes > self._limits.response_bytes:
            return False
        if self.failure is None and body:
            self._kept.append((now, body))
            self._kept_bytes += len(body)
            if self._kept_bytes >= DECODE_BYTES:
                return self.decode()
        return True

    def end(self, now: float) -> bool:
        """Decode what is kept and stamp the end (unless the stream ended earlier); whether the stream
        is still within its bounds."""
        if not self.decode():
            return False
        if self.state.result.finished_at is None:
            self.state.result.finished_at = now
        return True

    def decode(self) -> bool:
        """Decode the kept chunks, each at its own stamp; a bad stream is a failure of the request.
        Whether the stream is still within its bound on token events."""
        kept, self._kept, self._kept_bytes = self._kept, [], 0
        if self.failure is not None:
            return True
        try:
            for stamp, body in kept:
                if self._decode_chunk(stamp, body):
                    break
        except SseError as exc:
            self.failure = sse_failure(exc)
        except StreamFailureError as exc:
            self.failure = exc
        return self.state.result.token_events <= self._limits.token_events

    def _decode_chunk(self, stamp: float, body: bytes) -> bool:
        """Decode one chunk of Envoy's (up to its buffer limit, ~1 MiB) ``DECODE_BYTES`` at a time, the
        length checked after each: past ``max_tokens`` and its margin the stream is overlong, as the
        client says, and a megabyte of events past it is neither decoded nor kept. Whether it ended."""
        state = self.state
        for start in range(0, len(body), DECODE_BYTES):
            done = state.on_events(stamp, self._decoder.feed(body[start : start + DECODE_BYTES]))
            state.check_length()
            if done:
                return True
        return False

    def result(self, lag: tuple[float, float]) -> ProbeResult:
        """The finished record: its outcome (a failure, an abort before the format's end, or the
        state's own) and whether the observer's loop ``lag`` makes its stamps unreliable."""
        state, result = self.state, self.state.result
        if self.failure is not None:
            result.outcome, result.error = self.failure.outcome, self.failure.message
        elif not state.done:
            result.outcome, result.error = (
                Outcome.STREAM_ABORTED,
                f"the stream ended without {state.fmt.end_name}",
            )
        else:
            state.finish()
        result.loop_lag_s, result.loop_lag_share = lag
        result.unreliable = is_unreliable(ReadEvidence.of(result, state.token_reads))
        return result


def _response_from_headers(
    api: Api, request: _RequestBody, now: float, headers: Sequence[tuple[str, bytes]], limits: StreamLimits
) -> _Response:
    """The response whose headers came at ``now``: a failure already unless they say 200 and SSE."""
    result = ProbeResult(api, sent_at=request.ended_at, headers_at=now)
    result.max_tokens = request.facts.max_tokens
    fields = _header_map(headers)
    status = fields.get(":status", "")
    result.http_status = int(status) if status.isdigit() else None
    failure = None
    if result.http_status != 200:
        outcome = Outcome.RATE_LIMITED if result.http_status == 429 else Outcome.HTTP_STATUS
        failure = StreamFailureError(outcome, f"HTTP {status or '?'}")
    elif fields.get("content-type", "").partition(";")[0].strip().lower() != "text/event-stream":
        failure = StreamFailureError(Outcome.MALFORMED_STREAM, "not text/event-stream")
    return _Response(StreamState(result, FORMATS[api], TokenCounter(), exact_length=False), limits, failure)


class ObservedStream:
    """One ext_proc stream (one HTTP exchange): feed it each message with its stamp, then ``finish``.
    Once the exchange is ignored (``ignored`` says why) its messages change nothing. Its parts: the
    request body (``_RequestBody``), a models listing (``_ModelListing``) or the response (``_Response``)."""

    # Slots: ``watching``, ``ended`` and ``on_response_body`` run on every body chunk.
    __slots__ = (
        "_body_ended",
        "_limits",
        "_listing",
        "_models",
        "_request",
        "_response",
        "api",
        "ignored",
        "models_listed",
        "probe_id",
    )

    def __init__(self, limits: StreamLimits, models: AbstractSet[str]) -> None:
        self._limits = limits
        self._models = models
        self.api: Api | None = None
        self.ignored: Ignored | None = None
        self.probe_id: str | None = None
        self._request = _RequestBody(limits.request_body_bytes)
        self._listing: _ModelListing | None = None  # a GET /v1/models answer being read
        self.models_listed: tuple[str, ...] = ()  # what that answer listed, once it ended
        self._response: _Response | None = None
        self._body_ended = False

    @property
    def ended(self) -> bool:
        """Whether its record (or its reason for none) is settled: the response's body ended, the stream
        failed (what follows cannot mend it: a server past ``max_tokens`` may never stop), or the
        exchange is ignored. Envoy keeps the gRPC stream open a while longer (its deferred close)."""
        return (
            self._body_ended
            or (self._response is not None and self._response.failure is not None)
            or (self.ignored is not None and self._listing is None)
        )

    @property
    def watching(self) -> bool:
        """Whether its messages still matter (an ignored exchange's are dropped unread)."""
        return self.ignored is None

    def on_request_headers(self, now: float, headers: Sequence[tuple[str, bytes]], end: bool) -> None:
        fields = _header_map(headers)
        path = fields.get(":path", "").partition("?")[0]
        self.api = API_BY_PATH.get(path)
        probe = fields.get(_PROBE_KEY)
        if probe is not None and 0 < len(probe) <= MAX_PROBE_ID:
            self.probe_id = probe
        if path == MODELS_PATH and fields.get(":method") == "GET":
            self._listing = _ModelListing(self._limits.models_body_bytes)  # watched until its answer ends
        elif self.api is None or fields.get(":method") != "POST":
            self.ignored = Ignored.NOT_LLM
        elif end:
            self.ignored = Ignored.NOT_STREAMING  # no body: no "stream": true

    def on_request_body(self, now: float, body: bytes, end: bool) -> None:
        if self.ignored is not None or self._listing is not None:
            return
        self._request.add(now, body, end)
        if end and not self._request.facts.stream:
            self.ignored = Ignored.NOT_STREAMING

    def on_response_headers(self, now: float, headers: Sequence[tuple[str, bytes]], end: bool) -> None:
        if self.ignored is not None:
            return
        if self._listing is not None:
            if _header_map(headers).get(":status") != "200":
                self._end_listing(())
            return
        if self._request.ended_at is None or self.api is None:
            self.ignored = Ignored.INCOMPLETE
            return
        self._response = _response_from_headers(self.api, self._request, now, headers, self._limits)
        if end:
            self._end(now)

    def on_response_body(self, now: float, body: bytes, end: bool) -> None:
        if self.ignored is not None:
            return
        if self._listing is not None:
            listed = self._listing.add(body, end)
            if listed is not None:
                self._end_listing(listed)
            return
        response = self._response
        if response is None:
            self.ignored = Ignored.INCOMPLETE
        elif not response.add(now, body):
            self._give_up()
        elif end:
            self._end(now)

    def _end_listing(self, listed: tuple[str, ...]) -> None:
        self.models_listed = listed
        self._listing = None
        self.ignored = Ignored.NOT_LLM

    def _give_up(self) -> None:
        self.ignored = Ignored.TOO_LARGE
        self._response = None

    def _end(self, now: float) -> None:
        self._body_ended = True
        if self._response is not None and not self._response.end(now):
            self._give_up()

    def finish(self, now: float, lag: tuple[float, float] = (0.0, 0.0)) -> Observed | None:
        """The record of a watched exchange (``None`` when it was ignored: ``ignored`` says why). A
        stream that ended before its response did is ``STREAM_ABORTED``. ``lag``: the largest lateness
        of the observer's event loop while the stream was open, and the share of late samples
        (``streams.saturation.LagMonitor.since``): the client's own rule judges whether its stamps, taken
        by that loop, can be trusted (``ProbeResult.unreliable``)."""
        if self._listing is not None:  # the answer to GET /v1/models never ended
            self._end_listing(())
        if self.ignored is not None:
            return None
        if self._response is None:
            self.ignored = Ignored.INCOMPLETE
            return None
        if not self._body_ended:
            self._end(now)
        if self._response is None:  # the last batch was past the bound
            return None
        result = self._response.result(lag)
        if self.probe_id is None:
            result.error = None  # it may quote what the server said of the request
        model = self._request.facts.model
        label = model if model is not None and model in self._models else OTHER_MODEL
        return Observed(result, label, self._request.length, self.probe_id)
