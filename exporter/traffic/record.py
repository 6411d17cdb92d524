"""One observed HTTP exchange, from the stamped messages Envoy sent about it to a ``ProbeResult``: the
same record a probe writes, decoded by the probe's own decoder (``probe.sse``'s ``SseDecoder`` and
``probe.stream``'s ``StreamState``, with its chunk shapes and token counting), so a user's stream and a
probe's are measured by one definition.

The observer's gRPC handler only stamps each message and hands it here. Response chunks are kept as
(stamp, bytes) and decoded in batches (``DECODE_BYTES``), each with its own arrival stamp, so the bytes a
stream holds stay bounded whatever its length. What a record may cost is bounded (``StreamLimits``): a
request body past its bound is not read (model ``other``), a stream past its bytes or token events is
given up (``Ignored.TOO_LARGE``). No prompt or answer text is kept once decoded.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import msgspec

from exporter.probe.openai import FORMATS
from exporter.probe.result import Outcome, ProbeResult
from exporter.probe.sse import SseDecoder, SseError
from exporter.probe.stream import StreamFailureError, StreamState
from exporter.probe.target import PROBE_HEADER
from exporter.probe.tokens import TokenCounter
from exporter.settings.target import Api

OTHER_MODEL = "other"
# The paths of the streaming APIs the probe speaks; anything else passes unobserved (counted).
API_BY_PATH: Mapping[str, Api] = {fmt.path: api for api, fmt in FORMATS.items()}
_PROBE_KEY = PROBE_HEADER.lower()  # Envoy sends header names lower-cased
DECODE_BYTES = 64 * 1024  # kept response bytes decoded at once: a batch, not a call per chunk


class Ignored(StrEnum):
    """Why an exchange gave no record (counted, by reason)."""

    NOT_LLM = "not_llm"  # another route: not one of the streaming APIs
    PROBE = "probe"  # the exporter's own probe (probe.target.PROBE_HEADER): not a user's
    NOT_STREAMING = "not_streaming"  # an API request without "stream": true
    TOO_LARGE = "too_large"  # past the bytes or token events a stream may cost
    INCOMPLETE = "incomplete"  # the observer saw the exchange end before its response began


OVER_CAPACITY = "over_capacity"  # a stream refused: the observer's streams in flight were at their cap
ERROR = "error"  # a bug of ours while observing a stream (logged with its traceback)
SKIP_REASONS = (*(reason.value for reason in Ignored), OVER_CAPACITY, ERROR)
"""Every reason a stream leaves no record, as counted (the label's values, all exported from the start)."""


@dataclass(frozen=True)
class StreamLimits:
    """What one stream may cost the observer."""

    request_body_bytes: int = 1024 * 1024  # enough for the model and max_tokens of any normal request
    response_bytes: int = 64 * 1024 * 1024
    token_events: int = 100_000
    max_line_bytes: int = 4 * 1024 * 1024  # the probe's SSE line bound


@dataclass(frozen=True)
class Observed:
    """A finished record: the probe's result type, and the bounded label of its model."""

    result: ProbeResult
    model: str


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


class ObservedStream:
    """One ext_proc stream (one HTTP exchange): feed it each message with its stamp, then ``finish``.
    Once the exchange is ignored (``ignored`` says why) its messages change nothing."""

    def __init__(self, limits: StreamLimits, models: frozenset[str]) -> None:
        self._limits = limits
        self._models = models
        self.api: Api | None = None
        self.ignored: Ignored | None = None
        self._request_body = bytearray()
        self._request_ended_at: float | None = None
        self._facts = RequestFacts()
        self._state: StreamState | None = None
        self._decoder = SseDecoder(limits.max_line_bytes)
        self._kept: list[tuple[float, bytes]] = []
        self._kept_bytes = 0
        self._response_bytes = 0
        self._failure: StreamFailureError | None = None
        self._body_ended = False

    @property
    def watching(self) -> bool:
        """Whether its messages still matter (an ignored exchange's are dropped unread)."""
        return self.ignored is None

    def on_request_headers(self, now: float, headers: Sequence[tuple[str, bytes]], end: bool) -> None:
        fields = _header_map(headers)
        self.api = API_BY_PATH.get(fields.get(":path", "").partition("?")[0])
        if self.api is None or fields.get(":method") != "POST":
            self.ignored = Ignored.NOT_LLM
        elif _PROBE_KEY in fields:
            self.ignored = Ignored.PROBE
        elif end:
            self.ignored = Ignored.NOT_STREAMING  # no body: no "stream": true

    def on_request_body(self, now: float, body: bytes, end: bool) -> None:
        if self.ignored is not None:
            return
        if len(self._request_body) + len(body) <= self._limits.request_body_bytes:
            self._request_body += body
        else:
            self._request_body = bytearray(b"{}")  # not read: the model is "other", no token limit
        if end:
            self._request_ended_at = now
            self._facts = request_facts(bytes(self._request_body))
            self._request_body = bytearray()
            if not self._facts.stream:
                self.ignored = Ignored.NOT_STREAMING

    def on_response_headers(self, now: float, headers: Sequence[tuple[str, bytes]], end: bool) -> None:
        if self.ignored is not None:
            return
        if self._request_ended_at is None or self.api is None:
            self.ignored = Ignored.INCOMPLETE
            return
        result = ProbeResult(self.api, sent_at=self._request_ended_at, headers_at=now)
        result.max_tokens = self._facts.max_tokens
        fields = _header_map(headers)
        status = fields.get(":status", "")
        result.http_status = int(status) if status.isdigit() else None
        self._state = StreamState(result, FORMATS[self.api], TokenCounter(), exact_length=False)
        if result.http_status != 200:
            outcome = Outcome.RATE_LIMITED if result.http_status == 429 else Outcome.HTTP_STATUS
            self._failure = StreamFailureError(outcome, f"HTTP {status or '?'}")
        elif fields.get("content-type", "").partition(";")[0].strip().lower() != "text/event-stream":
            self._failure = StreamFailureError(Outcome.MALFORMED_STREAM, "not text/event-stream")
        if end:
            self._end(now)

    def on_response_body(self, now: float, body: bytes, end: bool) -> None:
        if self.ignored is not None:
            return
        if self._state is None:
            self.ignored = Ignored.INCOMPLETE
            return
        self._response_bytes += len(body)
        if self._response_bytes > self._limits.response_bytes:
            self._give_up()
            return
        if self._failure is None and body:
            self._kept.append((now, body))
            self._kept_bytes += len(body)
            if self._kept_bytes >= DECODE_BYTES:
                self._decode()
        if end:
            self._end(now)

    def _give_up(self) -> None:
        self.ignored = Ignored.TOO_LARGE
        self._state = None
        self._kept = []

    def _decode(self) -> None:
        """Decode the kept chunks, each at its own stamp; a bad stream is a failure of the request."""
        kept, self._kept, self._kept_bytes = self._kept, [], 0
        state = self._state
        if state is None or self._failure is not None:
            return
        try:
            for stamp, body in kept:
                if state.on_events(stamp, self._decoder.feed(body)):
                    break
        except SseError as exc:
            self._failure = StreamFailureError(Outcome.MALFORMED_STREAM, str(exc))
        except StreamFailureError as exc:
            self._failure = exc
        if state.result.token_events > self._limits.token_events:
            self._give_up()

    def _end(self, now: float) -> None:
        self._decode()
        self._body_ended = True
        if self._state is not None and self._state.result.finished_at is None:
            self._state.result.finished_at = now

    def finish(self, now: float) -> Observed | None:
        """The record of a watched exchange (``None`` when it was ignored: ``ignored`` says why). A
        stream that ended before its response did is ``STREAM_ABORTED``."""
        if self.ignored is not None:
            return None
        if self._state is None:
            self.ignored = Ignored.INCOMPLETE
            return None
        if not self._body_ended:
            self._end(now)
        if self.ignored is not None:  # the last batch was past the bound
            return None
        state, result = self._state, self._state.result
        if self._failure is not None:
            result.outcome, result.error = self._failure.outcome, self._failure.message
        elif not state.done:
            result.outcome, result.error = (
                Outcome.STREAM_ABORTED,
                f"the stream ended without {state.fmt.end_name}",
            )
        else:
            state.finish()
        model = self._facts.model
        return Observed(result, model if model in self._models else OTHER_MODEL)
