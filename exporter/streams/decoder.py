"""What a stream's events mean for its ``ProbeResult``: pure bookkeeping, no I/O.

The client stamps each socket read once and hands the events decoded from it to ``StreamState``, which
sorts them into content tokens, reasoning tokens and bookkeeping chunks (role deltas, usage, ``[DONE]``),
counts tokens per chunk (``tokens.py``) and, at the end, decides the outcome of a stream that completed:
``OK``, ``NO_TOKENS`` or, for a response the server itself declared incomplete, ``TRUNCATED``. A stream
that ended at the server's own stop before ``max_tokens``, although exactly that many were asked for
(OpenAI and many gateways ignore ``ignore_eos``), is ``OK``: it completed and its timings are valid; the
shortfall is noted (``extra["short_of_max_tokens"]``) and judged as the workload's (``load.health``'s
``output_tokens``), not as a failed request.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

import msgspec

from exporter.streams.chunk_shapes import FAST_READERS, PLAIN_BATCH_READERS
from exporter.streams.limits import bookkeeping_limit, overlong_limit
from exporter.streams.openai import ApiFormat, Chunk, read_chunk
from exporter.streams.result import Outcome, ProbeResult, TokenSource
from exporter.streams.saturation import LAG_LIMIT_S
from exporter.streams.sse import DONE, SseError, SseEvent, SseTooLargeError
from exporter.streams.tokens import TokenCounter, reconcile

_DONE_BYTES = DONE.encode()
# A read of several token events counts against the request (``multi_event_reads``, the saturation
# rule) only when they may have arrived more than this far apart (its stamp, when the last of them
# arrived, is wrong for the others by that much at most): the lag a loop on time may have.
COALESCED_SPAN_S = LAG_LIMIT_S
_fast_loads = msgspec.json.Decoder().decode  # strict JSON, ~8x json.loads on a typical chunk


def loads(data: str) -> Any:
    """One chunk's JSON: msgspec's decoder, and the standard library's for what it refuses but JSON
    servers send anyway (NaN, Infinity, numbers beyond float range), so no chunk is judged by speed."""
    try:
        return _fast_loads(data)
    except ValueError:  # msgspec's DecodeError and ValidationError are ValueErrors
        return json.loads(data)


class StreamFailureError(Exception):
    """The stream said or did something that ends the request with ``outcome``."""

    def __init__(self, outcome: Outcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome
        self.message = message


def sse_failure(exc: SseError) -> StreamFailureError:
    """The failure bytes that do not decode make: ``TOO_LARGE`` past a bound of ``streams.sse`` (a line or
    an event), else ``MALFORMED_STREAM``."""
    outcome = Outcome.TOO_LARGE if isinstance(exc, SseTooLargeError) else Outcome.MALFORMED_STREAM
    return StreamFailureError(outcome, str(exc))


class StreamState:
    """One response's events, as they arrive.

    Over 150 lines, kept whole: its methods are the per-chunk path (``on_texts`` for the batches the
    template read, ``on_payload`` and ``_on_chunk`` for every other chunk, ``on_events`` for the
    general one), and all of them write the same result, counter and flags (``has_token``, ``done``,
    ``token_reads``) that the reader and the watchdog read between chunks (and the C reads' keep mode
    writes ``last_read``); a split would put an attribute hop or a call on every chunk for state that
    both halves need. What runs once per
    stream is in functions beside it (``settle``, ``shortfall``, ``stamp_before``, ``overlong``)."""

    __slots__ = (
        "batch_read",
        "bookkeeping",
        "bookkeeping_limit",
        "counter",
        "done",
        "exact_length",
        "fast_read",
        "fmt",
        "has_token",
        "incomplete",
        "last_read",
        "length_limit",
        "result",
        "text",
        "token_reads",
        "tool_events",
    )

    def __init__(
        self,
        result: ProbeResult,
        fmt: ApiFormat,
        counter: TokenCounter,
        *,
        exact_length: bool = True,
        keep_text: bool = False,
    ) -> None:
        self.result = result
        self.fmt = fmt
        self.fast_read = FAST_READERS.get(fmt.path)  # the common chunk shapes, typed (chunk_shapes.py)
        self.batch_read = PLAIN_BATCH_READERS.get(fmt.path)  # many plain ones at once
        self.counter = counter
        self.exact_length = exact_length  # the request asked for exactly max_tokens tokens
        self.done = False  # [DONE] (or the format's last event) seen
        self.has_token = False  # a content or reasoning token arrived (the TTFT clock stopped)
        self.token_reads = 0  # reads that carried at least one token event
        self.last_read = 0.0  # stamp of the latest read, for the idle-gap limit
        self.text: list[str] | None = [] if keep_text else None  # the answer's text, when kept
        self.incomplete: str | None = None  # why the server ended the answer incomplete
        self.tool_events: list[int] = []  # indexes of the token events that were tool-call arguments
        max_tokens = result.max_tokens
        self.length_limit = overlong_limit(max_tokens) if max_tokens is not None else math.inf
        self.bookkeeping = 0  # events that carried no token ([DONE] aside)
        self.bookkeeping_limit = bookkeeping_limit(max_tokens) if max_tokens is not None else math.inf

    def check_length(self) -> None:
        """Raise the ``OVERLONG`` failure once more token events came than ``length_limit`` (content and
        reasoning: ``max_tokens`` counts both), or more events without a token than ``bookkeeping_limit``;
        the reader calls it after each read or batch it decodes. Each token event holds some memory, and
        a server that ignores ``max_tokens`` may never stop (``streams.limits``)."""
        result = self.result
        events = len(result.token_times) + len(result.reasoning_times)
        if events > self.length_limit:
            raise overlong(f"{events} token events", result.max_tokens, self.length_limit)
        if self.bookkeeping > self.bookkeeping_limit:
            raise overlong(
                f"{self.bookkeeping} events without a token", result.max_tokens, self.bookkeeping_limit
            )

    def on_events(self, now: float, events: Sequence[SseEvent]) -> bool:
        """Account for the events of one read stamped ``now``; returns True once the stream's last
        event (``[DONE]``, or the format's own) came."""
        result = self.result
        known = len(result.token_times), len(result.reasoning_times)  # before this read
        tokens = 0  # token events (content or reasoning), each with its own stamp when read alone
        for event in events:
            data = event.data
            if data == DONE:
                self.done = True
                self.result.finished_at = now
                break
            chunk = self._parse(data, event.event)
            tokens += self._on_chunk(now, chunk)
            if chunk.end:
                self.done = True
                self.result.finished_at = now
                break
        if tokens:
            self.has_token = True
            self.token_reads += 1
            if tokens > 1 and now - stamp_before(result, now, *known) > COALESCED_SPAN_S:
                result.multi_event_reads += 1
                result.merged_events += tokens
        return self.done

    def on_payloads(self, run: list[tuple[float, bytes]]) -> int:
        """Reads that were each exactly one ``data:`` event, as (stamp, undecoded data): the leading
        plain chunks among them accounted as ``on_payload`` would each; returns how many (the rest,
        from the first that is not plain, is the caller's)."""
        if self.batch_read is None:
            return 0
        stamps, payloads = zip(*run, strict=True)
        texts = self.batch_read(payloads)
        if texts:
            self.on_texts(stamps[: len(texts)], texts)
        return len(texts)

    def on_texts(self, stamps: Sequence[float], texts: Sequence[str]) -> None:
        """Reads that were each one plain chunk, stamped ``stamps``, with texts ``texts`` (decoded here,
        or read by a template in keep mode: ``socket_reads.KeepMode``), each accounted as a token read."""
        result = self.result
        result.token_times.extend(stamps)
        result.token_counts.extend(self.counter.count_texts(texts))
        if self.text is not None:
            self.text.extend(texts)
        self.has_token = True
        self.token_reads += len(texts)

    def on_payload(self, now: float, payload: bytes) -> bool | None:
        """A read that was exactly one ``data:`` event, ``payload`` its undecoded data: accounted as
        ``on_events`` would; returns None, having changed nothing, when the fast path cannot read it
        (another shape, invalid UTF-8 or JSON: ``on_events`` must decide)."""
        if payload == _DONE_BYTES:
            self.done = True
            self.result.finished_at = now
            return True
        if self.fast_read is None:
            return None
        try:
            # Decoded first: msgspec checks the UTF-8 of the fields it reads, not of those it skips.
            chunk = self.fast_read(payload.decode("utf-8"))
        except UnicodeDecodeError:
            return None
        if isinstance(chunk, str):  # a plain content chunk (chunk_shapes.py): _on_chunk's text branch
            self.on_texts((now,), (chunk,))
            return self.done
        if chunk is None:
            return None
        if self._on_chunk(now, chunk):
            self.has_token = True
            self.token_reads += 1
        if chunk.end:
            self.done = True
            self.result.finished_at = now
        return self.done

    def _parse(self, data: str, event: str | None) -> Chunk:
        if self.fast_read is not None and (chunk := self.fast_read(data)) is not None:
            return Chunk(chunk) if isinstance(chunk, str) else chunk
        try:
            return read_chunk(self.fmt, loads(data), event)
        except ValueError as exc:  # JSONDecodeError is a ValueError
            raise StreamFailureError(Outcome.MALFORMED_STREAM, f"bad chunk: {exc}") from None

    def _on_chunk(self, now: float, chunk: Chunk) -> int:
        """Returns 1 when the chunk was a token event (content or reasoning), else 0."""
        result = self.result
        if chunk.error is not None:
            raise StreamFailureError(Outcome.STREAM_ABORTED, f"error event in the stream: {chunk.error}")
        if chunk.completion_tokens is not None:
            result.completion_tokens_reported = chunk.completion_tokens
        if chunk.prompt_tokens is not None:
            result.prompt_tokens_reported = chunk.prompt_tokens
        if chunk.finish_reason is not None:
            result.finish_reason = chunk.finish_reason
        if chunk.cached_tokens is not None:
            result.prompt_tokens_cached = chunk.cached_tokens
        if chunk.incomplete is not None:
            self.incomplete = chunk.incomplete
        if chunk.text:
            result.token_times.append(now)
            count = self.counter.count(chunk)
            result.token_counts.append(count)
            if chunk.tool:
                self.tool_events.append(len(result.token_counts) - 1)
                result.tool_call_tokens += count
            if self.text is not None:
                self.text.append(chunk.text)
            return 1
        if chunk.reasoning:
            result.reasoning_times.append(now)
            self.counter.count(chunk)
            return 1
        self.counter.hold(chunk)
        self.bookkeeping += 1
        return 0

    def finish(self, *, exact_length: bool | None = None) -> None:
        """Settle a stream that ended normally (``settle``; ``exact_length`` defaults to what the
        request asked for)."""
        settle(self, self.exact_length if exact_length is None else exact_length)


def overlong(what: str, max_tokens: int | None, limit: float) -> StreamFailureError:
    """The ``OVERLONG`` failure of a stream that sent ``what`` (more than ``limit``) for ``max_tokens``."""
    return StreamFailureError(Outcome.OVERLONG, f"{what} for max_tokens {max_tokens} (at most {limit})")


def stamp_before(result: ProbeResult, now: float, tokens: int, thoughts: int) -> float:
    """The stamp of the last token read before the one stamped ``now``, given how many content
    (``tokens``) and reasoning (``thoughts``) events came before it; without one the headers'
    stamp (unless they came in this very read), else the send's; ``-inf`` when none is known.
    Every byte of the read arrived after it (a read takes every byte already there), so its
    events arrived at most ``now`` minus this apart."""
    stamps = [
        times[count - 1]
        for times, count in ((result.token_times, tokens), (result.reasoning_times, thoughts))
        if count
    ]
    if not stamps:
        stamps = [stamp for stamp in (result.headers_at, result.sent_at) if stamp is not None and stamp < now]
    return max(stamps, default=-math.inf)


def settle(state: StreamState, exact_length: bool) -> None:
    """Settle a stream that ended normally, on its ``result``: its text (the chunks' texts, when
    kept), token source, reconciliation with the server's usage, the tool-call share (from the indexes
    of the token events that were tool-call arguments) and its outcome (truncated when the server
    ended the answer incomplete; ``exact_length``: the request asked for exactly ``max_tokens``)."""
    result, counter = state.result, state.counter
    if state.text is not None:
        result.output_text = "".join(state.text)
    result.token_source = counter.source or TokenSource.CHUNKS
    if counter.fallback_chunks:
        result.extra["token_fallback_chunks"] = counter.fallback_chunks
    if counter.reasoning_tokens:
        result.extra["reasoning_tokens"] = counter.reasoning_tokens
    reported = result.completion_tokens_reported
    if reported is not None and counter.needs_reconciling():
        target = reported - counter.reasoning_tokens
        result.token_counts, result.token_adjustment = reconcile(result.token_counts, target)
    held = counter.held_at_end(reported)
    if held and result.token_counts:
        result.token_counts[-1] += held
        result.extra["held_tokens_at_end"] = held
    if state.tool_events:  # the counts may have moved: recount the tool-call share
        result.tool_call_tokens = sum(result.token_counts[i] for i in state.tool_events)
    result.outcome = completed_outcome(result)
    if state.incomplete is not None:
        result.outcome = Outcome.TRUNCATED
        result.error = f"the response ended incomplete ({state.incomplete})"
    elif exact_length and result.outcome is Outcome.OK and (short := shortfall(result, counter)):
        result.extra["short_of_max_tokens"] = short


def shortfall(result: ProbeResult, counter: TokenCounter) -> int:
    """Tokens fewer than ``max_tokens`` that came: judged by the server's ``usage.completion_tokens``
    when it reported one, else none after ``finish_reason == "length"`` (by chunks a count is a lower
    bound), else by the counted tokens."""
    if result.max_tokens is None:
        return 0
    if result.completion_tokens_reported is None and result.finish_reason == "length":
        return 0
    return max(0, result.max_tokens - total_tokens(result, counter))


def total_tokens(result: ProbeResult, counter: TokenCounter) -> int:
    """Output tokens, content and reasoning: the server's figure when it gave one."""
    reported = result.completion_tokens_reported
    return reported if reported is not None else result.output_tokens + counter.reasoning_tokens


def completed_outcome(result: ProbeResult) -> Outcome:
    """``NO_TOKENS`` without a content or reasoning token, else ``OK``: a stream that completed."""
    if not result.token_times:
        return Outcome.OK if result.reasoning_times else Outcome.NO_TOKENS
    return Outcome.OK
