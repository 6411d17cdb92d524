"""One response in flight: turns token deliveries into bytes on the socket and into metrics.

The engine runner and the script player both drive a ``TokenStream``: ``prepare`` builds the bytes of
the next delivery ahead of its due time (off the critical path), ``deliver`` writes them straight to the
transport from the emitter's callback and records metrics and lateness. Non-streaming requests use the
same object and only accumulate token ids.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from exporter.sim import tokenizer
from exporter.sim.emitter import LatenessRecorder
from exporter.sim.metrics import SimStats
from exporter.sim.protocol import ParsedRequest
from exporter.sim.replies import ChunkBuilder


@dataclass
class Delivery:
    """Prebuilt bytes for one chunk and what they mean."""

    frame: bytes
    tokens: int
    finished: bool
    finish_reason: str | None


class TokenStream:
    """Writes one request's chunks and records its metrics."""

    def __init__(
        self,
        req: ParsedRequest,
        seed: int,
        arrival: float,
        stats: SimStats,
        *,
        transport: asyncio.Transport | None = None,
        builder: ChunkBuilder | None = None,
        recorder: LatenessRecorder | None = None,
    ) -> None:
        self.req = req
        self.seed = seed
        self.arrival = arrival
        self.stats = stats
        self.transport = transport
        self.builder = builder
        self.recorder = recorder
        self.token_ids: list[int] = []
        self.prepared = 0
        self.sent = 0
        self.first_token_at: float | None = None
        self.last_token_at: float | None = None
        self.queue_time = 0.0
        self.finish_reason: str | None = None
        self.cached_tokens = 0  # prompt tokens the engine's prefix cache served
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    @property
    def closed(self) -> bool:
        """The client has gone away (only a streaming response can tell)."""
        return self.transport is not None and self.transport.is_closing()

    def prepare(self, tokens: int, finished: bool, finish_reason: str | None) -> Delivery:
        """Build the next delivery of ``tokens`` tokens (the last one when ``finished``)."""
        start = self.prepared
        ids, text = tokenizer.generated_text(self.seed, start, tokens)
        self.prepared += tokens
        reason = finish_reason if finished else None
        builder = self.builder
        if builder is None:
            self.token_ids.extend(ids)
            return Delivery(b"", tokens, finished, reason)
        if builder.plain and start > 0 and reason is None:
            return Delivery(builder.plain_frame(text), tokens, finished, reason)
        return Delivery(self._frame(builder, ids, text, start == 0, reason), tokens, finished, reason)

    def _frame(
        self, builder: ChunkBuilder, ids: list[int], text: str, first: bool, reason: str | None
    ) -> bytes:
        events = builder.open_events() if first else []
        events.append(builder.content(ids, first, self.prepared, reason, text))
        if reason is not None:
            events.extend(builder.close_events(self.prepared, reason))
        return builder.frame(events)

    def deliver(self, delivery: Delivery, intended: float) -> None:
        """Write ``delivery`` now (its due time was ``intended``) and account for it."""
        if self.done.done():
            return
        if self.transport is not None:
            self.transport.write(delivery.frame)
        now = time.monotonic()
        if self.recorder is not None and self.transport is not None:
            self.recorder.record(intended, now)
        self._account(delivery, now)

    def _account(self, delivery: Delivery, now: float) -> None:
        stats = self.stats
        if self.sent == 0:
            stats.ttft.observe(now - self.arrival)
            stats.prompt_tokens += len(self.req.prompt_ids)
            self.first_token_at = now
        elif self.last_token_at is not None:
            stats.itl.observe(now - self.last_token_at)
        self.sent += delivery.tokens
        self.last_token_at = now
        stats.generation_tokens += delivery.tokens
        if delivery.finished:
            self.finish_reason = delivery.finish_reason
            stats.success[delivery.finish_reason or "stop"] += 1
            stats.e2e.observe(now - self.arrival)
            stats.queue.observe(self.queue_time)
            stats.request_tpot.observe(self._tpot(now))
            self.done.set_result(None)

    def _tpot(self, now: float) -> float:
        """(E2E - TTFT) / (tokens - 1), and 0 for a request of one token, as vLLM records it."""
        if self.sent <= 1 or self.first_token_at is None:
            return 0.0
        return (now - self.first_token_at) / (self.sent - 1)

    def abort(self) -> None:
        """End the stream early (client gone, or server stopping); vLLM counts it as an abort."""
        if not self.done.done():
            self.stats.success["abort"] += 1
            self.done.set_result(None)
