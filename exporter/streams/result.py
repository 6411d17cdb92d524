"""What one probe request records, and the pure functions that turn its stamps into intervals.

A ``ProbeResult`` keeps raw monotonic timestamps (``time.perf_counter`` seconds) of the request's
life: when it was scheduled, when its bytes started to go out, when response headers came, and one
stamp per *content-bearing* event with the number of tokens that event carried. Role-only deltas,
usage-only chunks and ``[DONE]`` are not tokens and never appear in ``token_times``. A ``ProbeRun`` is
the results of one scheduled or on-demand probe; ``ProbeRefusedError`` says why a probe may not run now.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from exporter.stats.batch import intervals_from_stamps


class Outcome(StrEnum):
    """How a request ended. Everything but ``OK`` is a failure of the target (or of the network)."""

    OK = "ok"
    HTTP_STATUS = "http_status"  # a non-2xx status other than 429 (``http_status`` holds it)
    RATE_LIMITED = "rate_limited"  # 429
    CONNECT_ERROR = "connect_error"  # no connection, or it failed before any response byte
    TTFT_TIMEOUT = "ttft_timeout"  # no first token within the time-to-first-token limit
    IDLE_TIMEOUT = "idle_timeout"  # the stream went silent for longer than the idle-gap limit
    TOTAL_TIMEOUT = "total_timeout"  # the whole request exceeded its total limit
    STREAM_ABORTED = "stream_aborted"  # the connection closed mid-stream without [DONE] / finish
    MALFORMED_STREAM = "malformed_stream"  # bytes that are not valid SSE/JSON/UTF-8, wrong content-type
    NO_TOKENS = "no_tokens"  # the stream completed but carried no content token
    TRUNCATED = "truncated"  # the server declared the answer incomplete (Responses: not max_output_tokens)
    # Last, so the codes of the others (``exposition.window.OUTCOME_CODE``) stay what they were.
    OVERLONG = "overlong"  # more tokens than max_tokens allows (``stream.overlong_limit``): cut there
    TOO_LARGE = "too_large"  # headers, an SSE event or a body over its bound (``streams.limits``): cut there


class TokenSource(StrEnum):
    """Where the number of tokens in each chunk came from, best first."""

    TOKEN_IDS = "token_ids"  # the server returned token ids per chunk (``return_token_ids``)
    CONTINUOUS_USAGE = "continuous_usage"  # per-chunk ``usage.completion_tokens`` deltas
    TOKENIZER = "tokenizer"  # a local tokenizer.json counted each chunk's text
    CHUNKS = "chunks"  # one token per content chunk, reconciled with the final usage


@dataclass
class ProbeResult:
    """Everything one request recorded. Timestamps are ``time.perf_counter()`` seconds or None."""

    api: str  # "chat", "completions" or "responses"
    outcome: Outcome = Outcome.OK
    http_status: int | None = None
    error: str | None = None  # a short human-readable reason for a failure (never secrets)
    scheduled_at: float | None = None  # when the arrival process wanted it sent
    sent_at: float | None = None  # just before the request's bytes were written
    headers_at: float | None = None  # response headers received
    token_times: list[float] = field(default_factory=list)  # one stamp per content-bearing event
    token_counts: list[int] = field(default_factory=list)  # tokens carried by each of those events
    reasoning_times: list[float] = field(default_factory=list)  # events carrying reasoning content only
    finished_at: float | None = None  # stream ended ([DONE], finish, or failure)
    token_source: TokenSource = TokenSource.CHUNKS
    token_adjustment: int = 0  # tokens added (+) / removed (-) to match the final usage (see streams.tokens)
    prompt_tokens_intended: int | None = None
    prompt_tokens_reported: int | None = None  # the server's usage.prompt_tokens
    completion_tokens_reported: int | None = None  # the server's usage.completion_tokens
    prompt_tokens_cached: int | None = None  # the server's usage.prompt_tokens_details.cached_tokens
    tool_call_tokens: int = 0  # of the output tokens, those that were tool-call arguments
    session: str | None = None  # the conversation (multi-turn sessions; else the request's own id)
    turn: int = 1  # its turn in the conversation, from 1
    output_text: str | None = None  # the answer's text, kept only when the request asked (a session's)
    max_tokens: int | None = None
    finish_reason: str | None = None
    send_overhead_s: float | None = None  # client time from scheduled to sent (its own lateness)
    retries: int = 0  # resent once on a fresh connection after a stale keep-alive failure
    multi_event_reads: int = 0  # reads of several token events that may have come > 3 ms apart (stream.py)
    merged_events: int = 0  # the token events those reads carried: one stamp for them all
    early_stamps: int = 0  # reads whose kernel stamp was impossibly early (a retransmission): moved later
    loop_lag_s: float = 0.0  # the largest event-loop lag seen while this request was in flight
    loop_lag_share: float = 0.0  # share of lag samples meanwhile over streams.saturation.LAG_LIMIT_S
    cpu_share: float | None = None  # process CPU time / wall time while in flight (1.0: core never idle)
    unreliable: bool = False  # the client itself was saturated: timings may be wrong
    doubtful_gaps: int = 0  # of a flagged request's gaps between token events, those it may have wrong
    kernel_stamps: bool = False  # reads stamped by the kernel on arrival (probe.stamped), not by the loop
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def stamps(self) -> str:
        """How its reads were stamped: "kernel" (on arrival) or "read" (when the loop read them)."""
        return "kernel" if self.kernel_stamps else "read"

    @property
    def ok(self) -> bool:
        """Whether the request completed: a stream the server ended before ``max_tokens`` too (its
        shortfall is the workload's, ``extra["short_of_max_tokens"]``, not a failure)."""
        return self.outcome is Outcome.OK

    @property
    def token_events(self) -> int:
        """Events stamped as they came (content and reasoning): each has a gap before it, the first's
        from the send."""
        return len(self.token_times) + len(self.reasoning_times)

    @property
    def output_tokens(self) -> int:
        """Tokens received (sum over content events, tool-call arguments included)."""
        return sum(self.token_counts)

    @property
    def text_tokens(self) -> int:
        """Output tokens that were text, not tool-call arguments."""
        return self.output_tokens - self.tool_call_tokens


def intervals(result: ProbeResult, *, from_scheduled: bool = False) -> list[float]:
    """Per-token intervals for ``exporter.stats``: TTFT from the request write (or from the scheduled
    send time, which charges the client's own lateness to the request), then each event's gap followed
    by ``k - 1`` zero gaps for an event that carried ``k`` tokens. Empty when no token arrived."""
    start = result.scheduled_at if from_scheduled and result.scheduled_at is not None else result.sent_at
    if start is None or not result.token_times:
        return []
    return intervals_from_stamps(start, result.token_times, result.token_counts)


def ttft(result: ProbeResult, *, include_reasoning: bool = True) -> float | None:
    """Time to first token from the request write; with ``include_reasoning`` a reasoning token counts."""
    if result.sent_at is None:
        return None
    firsts = list(result.token_times[:1])
    if include_reasoning:
        firsts += result.reasoning_times[:1]
    return min(firsts) - result.sent_at if firsts else None


def e2e(result: ProbeResult) -> float | None:
    """Request write to end of stream."""
    if result.sent_at is None or result.finished_at is None:
        return None
    return result.finished_at - result.sent_at


class ProbeCutError(TimeoutError):
    """An on-demand probe that the exporter's shutdown ended before its own deadline."""


class ProbeRefusedError(Exception):
    """A probe that may not run now (budget, back-off, or one already running); the message says why,
    ``reason`` names it: ``paused``, ``busy``, ``backing_off``, ``over_requests``, ``over_tokens`` or
    ``over_context``."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class ProbeRun:
    """The results of one probe run and how long it took."""

    results: list[ProbeResult]
    duration_s: float
