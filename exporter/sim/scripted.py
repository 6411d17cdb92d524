"""Scripted mode: a request carries its exact timing, which the emitter plays back.

``plan_script`` is pure: from a ``Script`` and a token count it gives each chunk's offset from the
request's arrival and its size. Semantics (documented for clients in ``exporter.sim``):

* chunk 0 is due ``ttft`` seconds after the request arrived;
* chunk ``i > 0`` is due ``gaps[i-1]`` seconds after chunk ``i-1`` (the last gap repeats);
* chunk ``i`` holds ``chunk_sizes[i]`` tokens (the last size repeats; the final chunk is cut to fit);
* ``stalls = {token_index: seconds}`` delays the chunk that holds that (0-based) token by that much more.
"""

from __future__ import annotations

from exporter.sim.emitter import Emitter
from exporter.sim.protocol import Script
from exporter.sim.streams import Delivery, TokenStream


def _pick(values: tuple[float, ...] | tuple[int, ...], index: int) -> float:
    return values[min(index, len(values) - 1)]


def plan_script(script: Script, total_tokens: int) -> list[tuple[float, int]]:
    """``(offset seconds from arrival, tokens)`` per chunk, covering exactly ``total_tokens`` tokens."""
    plan: list[tuple[float, int]] = []
    offset, token = script.ttft, 0
    while token < total_tokens:
        size = min(int(_pick(script.chunk_sizes, len(plan))), total_tokens - token)
        if plan:
            offset += _pick(script.gaps, len(plan) - 1)
        offset += sum(script.stalls.get(t, 0.0) for t in range(token, token + size))
        plan.append((offset, size))
        token += size
    return plan


class ScriptPlayer:
    """Delivers a planned stream chunk by chunk at its exact due times."""

    def __init__(
        self, emitter: Emitter, stream: TokenStream, plan: list[tuple[float, int]], finish_reason: str
    ) -> None:
        self.emitter = emitter
        self.stream = stream
        self.plan = plan
        self.finish_reason = finish_reason
        self.index = 0

    def start(self) -> None:
        """Schedule the first chunk."""
        self._schedule_next()

    def _schedule_next(self) -> None:
        offset, tokens = self.plan[self.index]
        last = self.index == len(self.plan) - 1
        delivery = self.stream.prepare(tokens, last, self.finish_reason)
        due = self.stream.arrival + offset
        self.emitter.call_at(due, lambda: self._fire(delivery, due))

    def _fire(self, delivery: Delivery, due: float) -> None:
        if self.stream.closed:
            self.stream.abort()
            return
        self.stream.deliver(delivery, due)
        self.index += 1
        if not delivery.finished and not self.stream.done.done():
            self._schedule_next()
