"""Multi-turn sessions: conversations whose context grows turn by turn, as chat users send them.

A session is its first request's ``RequestSpec`` with ``followups`` (``exporter.probe.target.FollowUp``).
``run_session`` sends the turns one after the other: turn ``k`` waits for turn ``k-1``'s answer, then
the user's think time, then sends the whole conversation so far: every earlier user message, every
answer *exactly as it was streamed back* (``ProbeResult.output_text``: a regenerated or re-tokenised
answer would not match what the server cached, and the prefix cache would not be exercised), and the
new user message. For the completions API the conversation is one growing text: the previous prompt,
its answer and the new message, concatenated. A turn that fails ends its session (a conversation cannot
go on without its answer); the remaining turns are not sent. Cancelling ``run_session`` ends the
session at once.

Think time (``ThinkTime``): the user's pause between an answer's end and the next message, a
distribution in seconds. The default, ``lognormal:median=10,sigma=0.8,max=120`` (mean 13.8 s, p90
28 s), is an estimate, not a measurement: reading an answer of a few hundred tokens at 4-5 words a
second takes 10-60 s and typing a one-line follow-up 5-15 s; no public trace we know of records think
times (ShareGPT and LMSys-Chat have no timestamps; Mooncake's and Azure's traces have no session ids).
Set ``fixed:0`` for back-to-back turns.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from exporter.probe.result import ProbeResult
from exporter.probe.target import FollowUp, RequestSpec

Send = Callable[[RequestSpec, float | None], Awaitable[ProbeResult]]
WaitUntil = Callable[[float], Awaitable[None]]
THINK_KINDS = ("fixed", "uniform", "exponential", "lognormal")
DEFAULT_THINK_TIME = "lognormal:median=10,sigma=0.8,max=120"


@dataclass(frozen=True)
class ThinkTime:
    """Seconds between an answer's end and the user's next message: ``kind`` with its parameters,
    clipped to ``[0, max]``."""

    kind: str = "lognormal"
    params: tuple[tuple[str, float], ...] = (("median", 10.0), ("sigma", 0.8))
    max: float | None = 120.0

    def sample(self, n: int, rng: np.random.Generator) -> npt.NDArray[np.float64]:
        """``n`` think times in seconds."""
        p = dict(self.params)
        if self.kind == "fixed":
            values = np.full(n, p["value"])
        elif self.kind == "uniform":
            values = rng.uniform(p["low"], p["high"], size=n)
        elif self.kind == "exponential":
            values = rng.exponential(p["mean"], size=n)
        else:
            values = np.exp(rng.normal(np.log(p["median"]), p["sigma"], size=n))
        clipped: npt.NDArray[np.float64] = np.clip(values, 0.0, self.max if self.max is not None else np.inf)
        return clipped

    def describe(self) -> str:
        """The spec that rebuilds it."""
        fields = [f"{name}={value:g}" for name, value in self.params]
        if self.max is not None and self.kind != "fixed":
            fields.append(f"max={self.max:g}")
        return f"{self.kind}:{','.join(fields)}"


_THINK_PARAMS = {
    "fixed": ("value",),
    "uniform": ("low", "high"),
    "exponential": ("mean",),
    "lognormal": ("median", "sigma"),
}


def parse_think_time(spec: str | float | Mapping[str, Any]) -> ThinkTime:
    """``"fixed:2"``, ``"2"``, ``"uniform:low=1,high=8"``, ``"exponential:mean=5"``,
    ``"lognormal:median=10,sigma=0.8,max=120"`` or the same as a mapping with ``kind``; raises
    ``ValueError`` naming the field and the valid options."""
    fields = _think_fields(spec)
    kind = str(fields.pop("kind", "fixed"))
    if kind not in _THINK_PARAMS:
        raise ValueError(f'unknown think-time distribution "{kind}"; valid: {", ".join(THINK_KINDS)}')
    limit = fields.pop("max", None)
    expected = _THINK_PARAMS[kind]
    unknown = sorted(set(fields) - set(expected))
    if unknown or set(expected) - set(fields):
        raise ValueError(f"{kind} think time needs {', '.join(expected)} (and optionally max), got {spec!r}")
    values = {name: _seconds(fields[name], f"{kind}.{name}") for name in expected}
    if kind == "uniform" and values["low"] > values["high"]:
        raise ValueError(f"uniform think time: low must be <= high, got {spec!r}")
    if kind == "lognormal" and values["median"] <= 0:
        raise ValueError(f"lognormal think time: median must be > 0 seconds, got {spec!r}")
    maximum = None if limit is None else _seconds(limit, f"{kind}.max")
    return ThinkTime(kind, tuple((name, values[name]) for name in expected), maximum)


def _think_fields(spec: str | float | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(spec, Mapping):
        return dict(spec)
    if isinstance(spec, int | float) and not isinstance(spec, bool):
        return {"kind": "fixed", "value": spec}
    text = str(spec).strip()
    kind, sep, rest = text.partition(":")
    if not sep:
        return {"kind": "fixed", "value": text}
    if kind == "fixed" and "=" not in rest:
        return {"kind": "fixed", "value": rest}
    fields: dict[str, Any] = {"kind": kind}
    for item in filter(None, rest.split(",")):
        name, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f'think time "{text}": "{item}" needs name=value')
        fields[name.strip()] = value.strip()
    return fields


def _seconds(value: object, where: str) -> float:
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"think time {where}: expected seconds, got {value!r}") from None
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"think time {where}: expected seconds >= 0, got {value!r}")
    return seconds


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
