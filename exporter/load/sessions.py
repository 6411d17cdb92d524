"""Multi-turn sessions: conversations whose context grows turn by turn, as chat users send them.

A session is its first request's ``RequestSpec`` with ``followups`` (``exporter.streams.request.FollowUp``).
``run_session`` sends the turns one after the other: turn ``k`` waits for turn ``k-1``'s answer, then
the user's think time, then sends the whole conversation so far: every earlier user message, every
answer *exactly as it was streamed back* (``ProbeResult.output_text``: a regenerated or re-tokenised
answer would not match what the server cached, and the prefix cache would not be exercised), and the
new user message. For the completions API the conversation is one growing text: the previous prompt,
its answer and the new message, concatenated. A turn that fails ends its session (a conversation cannot
go on without its answer); the remaining turns are not sent. Cancelling ``run_session`` ends the
session at once.

Think time between turns is ``exporter.settings.think_time.ThinkTime``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from exporter.streams.request import FollowUp, RequestSpec
from exporter.streams.result import ProbeResult

Send = Callable[[RequestSpec, float | None], Awaitable[ProbeResult]]
WaitUntil = Callable[[float], Awaitable[None]]


def next_turn(
    first: RequestSpec, previous: RequestSpec, answer: str, follow: FollowUp, turn: int
) -> RequestSpec:
    """Turn ``turn``'s request: the conversation so far (``previous`` and its ``answer``, verbatim)
    and the new user message."""
    if previous.messages is not None:
        messages = (*previous.messages, ("assistant", answer), ("user", follow.content))
        prompt = follow.content
    else:
        messages = None
        prompt = previous.prompt + answer + follow.content
    session = first.session or first.request_id
    return RequestSpec(
        prompt=prompt,
        max_tokens=follow.max_tokens,
        messages=messages,
        request_id=f"{session}-t{turn}",
        extra_body=first.extra_body,
        tool_calls=first.tool_calls,
        session=session,
        turn=turn,
        keep_text=turn <= len(first.followups),
    )


async def run_session(
    send: Send,
    first: RequestSpec,
    scheduled_at: float,
    wait_until: WaitUntil,
    clock: Callable[[], float] = time.perf_counter,
) -> list[tuple[RequestSpec, ProbeResult]]:
    """Send a session's turns in order (see the module docstring); ``(spec, result)`` per sent turn."""
    spec = replace(
        first, followups=(), keep_text=bool(first.followups), session=first.session or first.request_id
    )
    sent: list[tuple[RequestSpec, ProbeResult]] = [(spec, await send(spec, scheduled_at))]
    for turn, follow in enumerate(first.followups, start=2):
        previous, result = sent[-1]
        if not result.ok or result.output_text is None:
            break
        due = (result.finished_at or clock()) + follow.think_s
        await wait_until(due)
        spec = next_turn(first, previous, result.output_text, follow, turn)
        sent.append((spec, await send(spec, max(due, clock()))))
    return sent


def session_turns(specs: Sequence[RequestSpec]) -> int:
    """Requests the sessions among ``specs`` will send at most (every turn)."""
    return sum(1 + len(spec.followups) for spec in specs)


def planned_tokens(spec: RequestSpec) -> int:
    """Prompt and output tokens a request (a whole session) will cost at most: every turn re-sends the
    conversation so far, so a session's prompt tokens grow with each turn (for budgets)."""
    context = spec.prompt_tokens or 0
    total = context + spec.max_tokens
    answer = spec.max_tokens
    for follow in spec.followups:
        context += answer + (follow.content_tokens or 0)
        total += context + follow.max_tokens
        answer = follow.max_tokens
    return total
