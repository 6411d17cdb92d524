"""``StreamReader``: one response's bytes, as the connection stamps them, turned into a ``ProbeResult``.

It is the ``ResponseSink`` of one request (``http.py`` calls it from ``data_received``) and does as
little as it can there. Until the first token has arrived it decodes every read at once (the
time-to-first-token limit and a capacity trial's give-up wait need to know); after that it only keeps
each read's bytes with its stamp. The SSE, JSON and token bookkeeping (``sse.py``, ``stream.py``) of the
kept reads runs in a loop callback once ``FLUSH_READS`` reads are kept (``flushes.py``: the batches of
every stream on the loop, a bounded share of them per turn), and the end of the stream is settled in
one (``call_soon``): every socket that became readable in the same turn of the event loop is
stamped first, and the decoding comes after. Each read is still decoded on its own, with its own stamp,
so the result is exactly what decoding it on arrival would have given.

Why in small batches, not all at the end: measured with 100 streams of 64 tokens in a closed loop, the
streams end within one 20 ms gap of each other; decoding every stream's 63 reads at its end (~0.35 ms
each, 35 ms for all) held the loop so long that the last token of the later streams was stamped 15-60 ms
late. Batches of ``FLUSH_READS`` spread that work over the stream.

With the C reads (``socket_reads.NativeSocketReads``) most kept reads never come through ``on_read``: the
transport keeps each read that is one lone ``data:`` event as (stamp, event data) in the same list
(``keep_mode``), and the reader decodes each run of them in one go (``StreamState.on_payloads``: one
JSON call for the run), in batches of ``BATCH_READS``. Reads kept by ``on_read`` carry a third item,
None, so the two kinds stay apart in one ordered list. Once the first token has come, its chunk is the
stream's template (``chunk_shapes.plain_template``): the transport keeps each later chunk that differs
from it in its text alone as (stamp, that text), a ``str``, and those need no decoding at all
(measured in pairs at 100 streams of 64 tokens, ``bench/probe_ab.py``: ~3% less CPU for the client).
A chunk that does not fit is kept as its data and decoded; the first plain one among them becomes the
next template.

Decoding is scheduled early anyway when a read may end the stream (it holds ``[DONE]``, an ``"error"``
object or the format's own end events) or when the kept bytes pass ``FLUSH_BYTES`` (a bound on memory and
on how long a too-long line goes unnoticed). After ``[DONE]`` the reader waits ``DRAIN_LIMIT_S`` for the
end of the HTTP body, so the connection can be reused; a server that never ends it costs its connection,
not the request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import cast

from exporter.probe.flushes import loop_flushes
from exporter.probe.http import HttpError
from exporter.probe.socket_reads import KeepMode
from exporter.streams.chunk_shapes import plain_template
from exporter.streams.decoder import StreamFailureError, StreamState, sse_failure
from exporter.streams.result import Outcome
from exporter.streams.sse import SseDecoder, SseError

ERROR_BODY_LIMIT = 4096
DRAIN_LIMIT_S = 1.0  # after [DONE], how long to wait for the end of the HTTP body
FLUSH_BYTES = 256 * 1024
FLUSH_READS = 8  # kept reads decoded together: ~50 us of work per batch at most
BATCH_READS = 32  # the same, for lone events the transport kept (decoded in one go: ~1 us each)
# A kept read: (stamp, the data of one lone SSE event) or (stamp, the text the template read in it) as
# the transport keeps it in keep mode (socket_reads.KeepMode), or (stamp, the body bytes of the read,
# None) as on_read keeps it.
Kept = tuple[float, bytes] | tuple[float, str] | tuple[float, bytes, None]


class StreamReader:
    """Receives one response; ``finished`` resolves when the request's fate is known.

    Over 150 lines, kept whole: it is one state machine of a response, called from the connection on
    every read (``on_read``, and keep mode's lists) and from the loop on every batch: decoding as reads
    come until the first token, then the kept list it shares with the transport, the flush scheduled
    on it, the end scheduled after the reads of its turn, the drain after ``[DONE]`` and the failure.
    Each of those steps reads the same few fields (``finished``, ``_kept``, ``_flush_due``, ``_ending``,
    the transport's ``_unkeep``); a split of the end from the reading would put an attribute hop on
    every read's check of ``finished`` and hand the kept list and keep mode between two objects. What
    is not that state machine is beside it: a non-200 body (``ErrorBody``), the header check
    (``content_type_failure``), the template of a plain chunk (``template_of``) and the loop's queue
    of batches (``flushes.py``)."""

    def __init__(
        self, state: StreamState, max_line_bytes: int, on_first_token: Callable[[], None] | None = None
    ) -> None:
        self.state = state
        self._loop = asyncio.get_running_loop()
        self._flushes = loop_flushes(self._loop)
        self.finished: asyncio.Future[None] = self._loop.create_future()
        self.failure: StreamFailureError | HttpError | None = None
        self.headers_received = False
        self.body_complete = False  # the HTTP body ended (the connection may be reused)
        self._decoder = SseDecoder(max_line_bytes)
        self._max_line = max_line_bytes
        self._end_markers = state.fmt.end_markers
        self._on_first_token = on_first_token
        self._kept: list[Kept] | None = None  # None: decoding as reads arrive
        self._kept_bytes = 0
        self._error_body: ErrorBody | None = None  # the body of a response that is not a 200
        self._drain: asyncio.TimerHandle | None = None
        self._flush_due = False  # a decoding callback is scheduled
        self._ending = False  # the end of the body (or the connection) came; ``_end`` is scheduled
        self._unkeep: Callable[[], None] | None = None  # ends the transport's keep mode (keep_mode)
        self._template: list[bytes] = []  # [prefix, suffix] of the plain chunks, shared with the transport

    # -- ResponseSink ----------------------------------------------------------------------------------

    def on_headers(self, now: float, status: int, headers: dict[str, str]) -> None:
        self.headers_received = True
        result = self.state.result
        result.headers_at, result.http_status = now, status
        if status != 200:
            self._error_body = ErrorBody(status)
        elif (failure := content_type_failure(headers)) is not None:
            self._fail(failure)

    def on_read(self, now: float, body: bytes) -> None:
        if self.finished.done():
            return
        self.state.last_read = now
        if self._error_body is not None:
            if (failure := self._error_body.add(body)) is not None:
                self._fail(failure)
        elif self._kept is not None:
            kept = self._kept
            kept.append((now, body, None))
            self._kept_bytes += len(body)
            if not self._flush_due and (
                len(kept) >= FLUSH_READS or self._kept_bytes > FLUSH_BYTES or self._may_end(body)
            ):
                self._flush_soon()
        else:
            self._guarded(self._decode, now, body)

    def keep_mode(self, unkeep: Callable[[], None]) -> KeepMode | None:
        """While reads are kept (after the first token), the transport may keep whole-chunk reads in
        the same list itself, as ``on_read`` would, with no call (``socket_reads.KeepMode``); the reads that
        may end the stream (``_may_end``) or pass ``FLUSH_BYTES`` still come to ``on_read``."""
        if self._kept is None or self._error_body is not None or self.finished.done() or not self._clean():
            return None
        self._unkeep = unkeep
        longest = min(FLUSH_BYTES, self._max_line)
        return KeepMode(
            self._kept, self.state, self._flush_soon, self._end_markers, BATCH_READS, longest, self._template
        )

    def _clean(self) -> bool:
        """Whether the SSE decoder will be clean once every kept read is decoded, so that the next
        read is a lone event if it looks like one (what the transport checks in keep mode)."""
        if not self._kept:
            return self._decoder.clean
        last = self._kept[-1]
        return len(last) == 2 or last[1][-2:] == b"\n\n"  # a blank line ends every event

    def _flush_soon(self) -> None:
        if not self._flush_due:
            self._flush_due = True
            self._flushes.add(self._scheduled_flush)  # with the loop's others, a bounded share per turn

    def _may_end(self, body: bytes) -> bool:
        # A loop, not any() over a generator: this runs on every read, and the generator cost 4x.
        for marker in self._end_markers:  # noqa: SIM110
            if marker in body:
                return True
        return False

    def on_end(self, now: float, error: HttpError | None) -> None:
        if self.finished.done():
            return
        # After the reads stamped in this turn of the loop, like every decoding step.
        self._ending = True
        self._loop.call_soon(self._scheduled_end, now, error)

    def _scheduled_flush(self) -> None:
        self._flush_due = False
        if not self.finished.done():
            self._guarded(self._flush)

    def _scheduled_end(self, now: float, error: HttpError | None) -> None:
        if not self.finished.done():
            self._guarded(self._end, now, error)

    # -- decoding ---------------------------------------------------------------------------------------

    def _decode(self, now: float, body: bytes) -> None:
        state = self.state
        had_token = state.has_token
        # Nearly every read is one whole "data: {...}" event of a common shape: read straight from
        # its bytes (no line splitting, no event objects); anything else takes the general path.
        payload = self._decoder.lone_payload(body)
        done = state.on_payload(now, payload) if payload is not None else None
        if done is None:
            try:
                events = self._decoder.feed(body)
            except SseError as exc:
                raise sse_failure(exc) from None
            done = bool(events) and state.on_events(now, events)
        state.check_length()
        if done:
            self._arm_drain()
            return
        if state.has_token and not had_token:
            self._kept = []  # from now on, keep the bytes and decode later
            if payload is not None:
                self._learn_template(payload)
            if self._on_first_token is not None:
                self._on_first_token()
                self._on_first_token = None  # once; and it may hold what holds this reader

    def _flush(self) -> None:
        """Decode every kept read, in order, each with its own stamp: a run of lone events kept by the
        transport in one go (``StreamState.on_payloads``), any other read on its own; then check the
        stream's length (kept reads are decoded here only, so this is where ``OVERLONG`` shows)."""
        self._flush_kept()
        self.state.check_length()

    def _flush_kept(self) -> None:
        kept = self._kept
        batch = kept.copy() if kept else []
        if kept:
            kept.clear()  # in place: the transport may be keeping reads in this very list
        self._kept_bytes = 0
        start, state = 0, self.state
        if batch and not state.done and max(map(len, batch)) == 2:
            stamps, items = zip(*batch, strict=True)
            if set(map(type, items)) == {str}:  # the usual batch: texts the template read, and no other
                state.on_texts(stamps, items)
                return
        while start < len(batch) and not state.done:
            item = batch[start]
            if len(item) == 3:  # a read kept by on_read
                self._decode_kept(item[0], item[1])
                start += 1
                continue
            kind, end = type(item[1]), start + 1
            while end < len(batch) and len(batch[end]) == 2 and type(batch[end][1]) is kind:
                end += 1
            if kind is str:  # texts the template read (keep mode)
                stamps, items = zip(*batch[start:end], strict=True)
                state.on_texts(stamps, items)
            else:
                self._decode_run(cast(list[tuple[float, bytes]], batch[start:end]))
            start = end

    def _decode_run(self, run: list[tuple[float, bytes]]) -> None:
        """Lone events' data as the transport kept them: the leading plain chunks in one go, the rest
        one by one (a stream whose chunks carry usage or token ids has no plain one)."""
        state = self.state
        plain = state.on_payloads(run)
        if plain:  # chunks the template missed (or there was none): the last plain one is the next
            self._learn_template(run[plain - 1][1])
        for now, payload in run[plain:]:
            if state.done:
                return
            if state.on_payload(now, payload) is None:  # not a shape the fast path reads
                self._decode(now, b"data: " + payload + b"\n\n")  # the read, as it came
            elif state.done:
                self._arm_drain()

    def _learn_template(self, payload: bytes) -> None:
        """Make the plain chunk ``payload`` (one lone event's data) the template of the chunks kept
        from now on, if it has one (``template_of``); else the last one stays."""
        if (found := template_of(self.state, payload)) is not None:
            self._template[:] = found  # in place: the transport holds this list

    def _decode_kept(self, now: float, body: bytes) -> None:
        """One kept read (``_decode``'s fast path inline: the first token has come, so only the end
        can change what the reader does next)."""
        payload = self._decoder.lone_payload(body)
        if payload is None or self.state.on_payload(now, payload) is None:
            self._decode(now, body)
        elif self.state.done:
            self._arm_drain()

    def expire(self, failure: StreamFailureError) -> None:
        """A time limit passed (``watchdog.py``): the reads kept so far still count, then the request
        ends with ``failure``."""
        if self.finished.done():
            return
        self._guarded(self.flush_quietly)
        self._fail(failure)

    def flush_quietly(self) -> None:
        """Decode what was kept, for a request given up (its tokens still count); failures ignored."""
        with contextlib.suppress(StreamFailureError):
            self._flush()

    def _end(self, now: float, error: HttpError | None) -> None:
        self._flush()
        if self.state.done:
            self._complete(error is None)
            return
        if self._error_body is not None:
            raise self._error_body.failure()
        if error is not None:
            self.failure = error
            self._resolve()
            return
        self.state.result.finished_at = now
        if self.state.result.finish_reason is None or self._decoder.pending:
            end = self.state.fmt.end_name
            raise StreamFailureError(Outcome.STREAM_ABORTED, f"the stream ended before {end}")
        self._complete(True)

    # -- the end -----------------------------------------------------------------------------------------

    def _arm_drain(self) -> None:
        if not self._ending:  # else the end of the body came with [DONE], as it nearly always does
            self._drain = self._loop.call_later(DRAIN_LIMIT_S, self._complete, False)

    def _complete(self, body_complete: bool) -> None:
        if self.finished.done():
            return
        self.body_complete = body_complete
        self._resolve()

    def _fail(self, failure: StreamFailureError) -> None:
        # Where it was raised (or what it was raised from) holds this reader: a cycle for the GC.
        failure.__traceback__ = failure.__context__ = failure.__cause__ = None
        self.failure = failure
        self._resolve()

    def _resolve(self) -> None:
        if self._unkeep is not None:
            self._unkeep()
            self._unkeep = None
        if self._drain is not None:
            self._drain.cancel()
        if not self.finished.done():
            self.finished.set_result(None)

    def _guarded(self, step: Callable[..., None], *args: object) -> None:
        # Called from the protocol: a stream failure ends the request; anything else is a bug of ours,
        # and it must reach the request's task (where it raises), not the loop's exception handler.
        try:
            step(*args)
        except StreamFailureError as exc:
            self._fail(exc)
        except Exception as exc:
            if not self.finished.done():
                self.finished.set_exception(exc)


def content_type_failure(headers: dict[str, str]) -> StreamFailureError | None:
    """The failure of a 200 response whose headers (names lower-cased) do not say it is an event
    stream; None when they do."""
    content_type = headers.get("content-type", "").partition(";")[0].strip().lower()
    if content_type == "text/event-stream":
        return None
    message = f"expected Content-Type text/event-stream, got {content_type or '(none)'}"
    return StreamFailureError(Outcome.MALFORMED_STREAM, message)


def template_of(state: StreamState, payload: bytes) -> tuple[bytes, bytes] | None:
    """The template (``chunk_shapes.plain_template``: [prefix, suffix]) of the plain chunk ``payload``,
    one lone event's data in ``state``'s format; None when it is not a plain chunk or has none."""
    read = state.fast_read
    try:
        text = read(payload.decode("utf-8")) if read is not None else None
    except UnicodeDecodeError:
        return None
    return plain_template(state.fmt.path, payload, text) if isinstance(text, str) else None


class ErrorBody:
    """The start of the body of a response whose ``status`` is not 200, kept for its message: up to
    ``ERROR_BODY_LIMIT`` bytes, where the response's failure is known without the rest."""

    __slots__ = ("_body", "_status")

    def __init__(self, status: int) -> None:
        self._status = status
        self._body = bytearray()

    def add(self, body: bytes) -> StreamFailureError | None:
        """Keep what fits of one read's ``body``; the response's failure once the limit is reached."""
        self._body += body[: ERROR_BODY_LIMIT - len(self._body)]
        return self.failure() if len(self._body) >= ERROR_BODY_LIMIT else None

    def failure(self) -> StreamFailureError:
        """The response's failure: ``RATE_LIMITED`` for a 429, else ``HTTP_STATUS``, with the body's
        message (``error_text``)."""
        outcome = Outcome.RATE_LIMITED if self._status == 429 else Outcome.HTTP_STATUS
        return StreamFailureError(outcome, f"HTTP {self._status}: {error_text(bytes(self._body))}")


def error_text(raw: bytes) -> str:
    """OpenAI's ``error.message`` when the body has one, else the start of the body."""
    text = raw.decode("utf-8", errors="replace")
    with contextlib.suppress(ValueError, KeyError, IndexError, AttributeError, TypeError):
        error = json.loads(text)["error"]
        return str(error["message"] if isinstance(error, dict) else error)[:200]
    return text[:200].strip() or "(empty body)"
