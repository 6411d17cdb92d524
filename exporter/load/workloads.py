"""A workload: prompt and output lengths, a prompt builder, length filters, and the requests it yields.

``Workload.sample(n, rng)`` returns ``n`` ``RequestSpec``s: lengths drawn from the workload's
``LengthSource``, kept only where ``prompt <= max_prompt_tokens``, ``output <= max_output_tokens`` and
``prompt + output <= max_total_tokens`` (the served context a one-shot run fits its requests to)
(rejection sampling: the filters *truncate* the distribution as filtering a trace would, rather than
clipping it; ``MAX_PROMPT_TOKENS`` and ``MAX_OUTPUT_TOKENS`` always apply), then a unique prompt of that length from the ``PromptBuilder`` and ``max_tokens`` set to
the output length. The same seed gives the same requests. The three filters, as one value, are a
``LengthLimits``, which also says what rejects the draws when too few pass (``draw_lengths``).

Lengths come either from two independent distributions (``IndependentLengths``, the presets) or from
the (prompt, output) pairs of a real trace, drawn jointly so their correlation survives
(``PairedLengths``).

*Sessions.* With ``turns`` (a distribution of turns per session) the workload yields conversations
(``exporter.load.sessions``): each is its first request, whose prompt length comes from ``lengths``,
with follow-ups whose *new* user message lengths come from ``followup_lengths`` (default: ``lengths``)
and whose think times come from ``think_time``. ``sample(n)`` then gives sessions that send ``n``
requests in all (the last one cut short, and as many sessions as that takes), ``sample_sessions(k)``
gives ``k`` sessions. A conversation
ends early where its next prompt (the context so far plus the new message) would pass
``max_prompt_tokens``, or that prompt plus its output ``max_total_tokens``. ``tool_calls`` asks every
request for a tool call; ``extra_body`` is merged into every request (structured output: ``{"response_format": {"type": "json_schema", ...}}``).
"""

from __future__ import annotations

import json
import secrets
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

import numpy as np

from exporter.load.prompts import PromptBuilder, SimPromptBuilder
from exporter.settings.lengths import (
    MAX_OUTPUT_TOKENS,
    MAX_PROMPT_TOKENS,
    IntArray,
    LengthDistribution,
)
from exporter.settings.think_time import DEFAULT_THINK_TIME, ThinkTime, parse_think_time
from exporter.settings.workload import WorkloadOptions, tool_calls_problem
from exporter.stats.latency import BoolArray
from exporter.streams.request import APIS, Api, FollowUp, RequestSpec

# Below this share of accepted draws the filters leave too little of the distribution to sample.
_MIN_ACCEPTANCE = 1e-3
# Tokens a chat template adds per message (the simulator's adds 5-14): room kept when a conversation's
# next prompt is checked against max_prompt_tokens.
_MESSAGE_OVERHEAD = 16


@runtime_checkable
class LengthSource(Protocol):
    """Draws ``n`` (prompt tokens, output tokens) pairs."""

    def sample(self, n: int, rng: np.random.Generator) -> tuple[IntArray, IntArray]: ...

    def describe(self) -> str: ...


@dataclass(frozen=True)
class IndependentLengths:
    """Prompt and output lengths drawn independently."""

    prompt: LengthDistribution
    output: LengthDistribution

    def sample(self, n: int, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
        return self.prompt.sample(n, rng), self.output.sample(n, rng)

    def describe(self) -> str:
        return f"prompt {self.prompt.describe()}, output {self.output.describe()}"


@dataclass(frozen=True)
class LengthLimits:
    """A workload's length filters (None: not set): prompt, output and prompt + output (the served
    context) at most so many tokens. ``MAX_PROMPT_TOKENS`` and ``MAX_OUTPUT_TOKENS`` always apply."""

    prompt: int | None = None
    output: int | None = None
    total: int | None = None

    def problem(self) -> str | None:
        """What is wrong with the limits (a limit below one token), by the workload field's name."""
        for name, value in (
            ("max_prompt_tokens", self.prompt),
            ("max_output_tokens", self.output),
            ("max_total_tokens", self.total),
        ):
            if value is not None and value < 1:
                return f"{name} must be >= 1, got {value}"
        return None

    def filters(self, prompts: IntArray, outputs: IntArray) -> dict[str, BoolArray]:
        """The draws each length filter that is set keeps, by the name an error gives it."""
        return {
            f"{name}={limit}": drawn <= limit
            for name, drawn, limit in (
                ("max_prompt_tokens", prompts, self.prompt),
                ("max_output_tokens", outputs, self.output),
            )
            if limit is not None
        }

    def fits_context(self, prompts: IntArray, outputs: IntArray) -> BoolArray:
        """The draws whose prompt + output fit ``total`` (all of them when it is not set)."""
        if self.total is None:
            return np.ones(len(prompts), dtype=bool)
        return prompts + outputs <= self.total

    def keep(self, prompts: IntArray, outputs: IntArray) -> BoolArray:
        """The draws every filter and both ceilings keep."""
        keep = (prompts <= MAX_PROMPT_TOKENS) & (outputs <= MAX_OUTPUT_TOKENS)
        for kept in self.filters(prompts, outputs).values():
            keep &= kept
        keep &= self.fits_context(prompts, outputs)
        return keep

    def rejection(self, prompts: IntArray, outputs: IntArray) -> tuple[str, str]:
        """What rejects the draws of a fresh sample ``prompts``, ``outputs``, and its fix: the length
        filters that reject any of it, and the served context when it does (it may be all that limits
        them: a filter that is set but rejects nothing is no part of the problem)."""
        limiting = [name for name, keep in self.filters(prompts, outputs).items() if not keep.all()]
        causes, fixes = [], []
        if limiting:
            causes.append(f"pass the filter{'s' * (len(limiting) > 1)} {' and '.join(limiting)}")
            fixes.append("loosen them" if len(limiting) > 1 else "loosen it")
        if not self.fits_context(prompts, outputs).all():
            causes.append(f"fit the served context (prompt + output <= {self.total} tokens)")
            fixes.append("ask for shorter prompts or outputs")
        if not causes:
            causes.append(
                f"stay within the ceilings (prompt <= {MAX_PROMPT_TOKENS}, output <= {MAX_OUTPUT_TOKENS})"
            )
            fixes.append("ask for shorter prompts or outputs")
        return " and ".join(causes), " and ".join(fixes)

    def fit_followups(self, first: RequestSpec, follow: list[FollowUp]) -> tuple[FollowUp, ...]:
        """The follow-ups whose prompts (the conversation so far) stay within ``prompt`` and, with
        their outputs, within ``total``."""
        prompt_limit = self.prompt or MAX_PROMPT_TOKENS
        total_limit = self.total or MAX_PROMPT_TOKENS + MAX_OUTPUT_TOKENS
        context = (first.prompt_tokens or 0) + first.max_tokens + _MESSAGE_OVERHEAD
        kept: list[FollowUp] = []
        for item in follow:
            context += (item.content_tokens or 0) + _MESSAGE_OVERHEAD
            if context > prompt_limit or context + item.max_tokens > total_limit:
                break
            kept.append(item)
            context += item.max_tokens + _MESSAGE_OVERHEAD
        return tuple(kept)

    def describe(self) -> str:
        """The filters that are set, as a person reads them ("none" without any)."""
        bounds = (("prompt", self.prompt), ("output", self.output), ("prompt + output", self.total))
        # Only the filters there are: custom lengths have none unless asked ("prompt <= None" was shown).
        return ", ".join(f"{name} <= {bound}" for name, bound in bounds if bound is not None) or "none"


def draw_lengths(
    lengths: LengthSource, limits: LengthLimits, n: int, rng: np.random.Generator, name: str
) -> tuple[IntArray, IntArray]:
    """``n`` (prompt, output) pairs of ``lengths`` that ``limits`` keep, by rejection sampling (so the
    filters truncate the distribution rather than clip it); a ``ValueError`` naming what rejects them
    and its fix when too few draws are kept to go on."""
    prompts: list[IntArray] = []
    outputs: list[IntArray] = []
    kept = drawn = 0
    while kept < n:
        batch = max(2 * (n - kept), 64)
        p, o = lengths.sample(batch, rng)
        keep = limits.keep(p, o)
        prompts.append(p[keep])
        outputs.append(o[keep])
        kept += int(keep.sum())
        drawn += batch
        if kept < _MIN_ACCEPTANCE * drawn and drawn > 10_000:
            causes, fixes = limits.rejection(*lengths.sample(1024, np.random.default_rng(0)))
            raise ValueError(f"workload {name}: only {kept} of {drawn} draws {causes}; {fixes}")
    return np.concatenate(prompts)[:n] if n else np.zeros(0, np.int64), (
        np.concatenate(outputs)[:n] if n else np.zeros(0, np.int64)
    )


def cut_to_requests(sessions: Sequence[RequestSpec], n: int) -> list[RequestSpec]:
    """The leading ``sessions`` whose turns add up to ``n``, the last one cut short. Every session
    sends at least one request, so ``n`` sessions always suffice."""
    specs: list[RequestSpec] = []
    total = 0
    for session in sessions:
        if total >= n:
            break
        cut = replace(session, followups=session.followups[: n - total - 1])
        specs.append(cut)
        total += 1 + len(cut.followups)
    return specs


@dataclass(frozen=True)
class Workload:
    """Requests of a named shape. ``api`` picks chat messages or a plain completions prompt."""

    name: str
    lengths: LengthSource
    builder: PromptBuilder = field(default_factory=SimPromptBuilder)
    api: Api = "chat"
    max_prompt_tokens: int | None = None  # filter: keep prompts of at most this many tokens
    max_output_tokens: int | None = None  # filter: keep outputs of at most this many tokens
    # filter: keep requests whose prompt + output fit this many tokens (the context the server serves)
    max_total_tokens: int | None = None
    description: str = ""
    turns: LengthDistribution | None = None  # turns per session; None: single requests
    followup_lengths: LengthSource | None = None  # (new message, output) lengths of later turns
    think_time: ThinkTime = field(default_factory=lambda: parse_think_time(DEFAULT_THINK_TIME))
    tool_calls: bool = False
    extra_body: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.api not in APIS:
            raise ValueError(f'workload {self.name}: unknown api "{self.api}"; valid: {", ".join(APIS)}')
        problem = tool_calls_problem(self.tool_calls, self.api)
        problem = problem or self.limits.problem()
        if problem is not None:
            raise ValueError(f"workload {self.name}: {problem}")

    @property
    def prompt_tokens_exact(self) -> bool:
        """Whether intended prompt lengths are exact for the target (only with the simulator's builder)."""
        return self.builder.exact

    def with_options(
        self,
        *,
        builder: PromptBuilder | None = None,
        api: Api | None = None,
        max_prompt_tokens: int | None = None,
        max_output_tokens: int | None = None,
        max_total_tokens: int | None = None,
    ) -> Workload:
        """A copy with another builder, api or filters (None keeps the current one)."""
        return replace(
            self,
            builder=builder or self.builder,
            api=api or self.api,
            max_prompt_tokens=max_prompt_tokens or self.max_prompt_tokens,
            max_output_tokens=max_output_tokens or self.max_output_tokens,
            max_total_tokens=max_total_tokens or self.max_total_tokens,
        )

    @property
    def limits(self) -> LengthLimits:
        """The length filters, as one value."""
        return LengthLimits(self.max_prompt_tokens, self.max_output_tokens, self.max_total_tokens)

    def share_over_context(self, draws: int = 1024) -> float:
        """The share of a fresh sample (seed 0, so the same every time) whose prompt + output is over
        ``max_total_tokens`` and left out: how much fitting to the served context cuts (0 without it)."""
        prompts, outputs = self.lengths.sample(draws, np.random.default_rng(0))
        return float(1.0 - self.limits.fits_context(prompts, outputs).mean())

    def sample_lengths(self, n: int, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
        """``n`` filtered (prompt, output) length pairs, without building prompts."""
        if n < 0:
            raise ValueError(f"workload {self.name}: cannot sample {n} requests")
        return draw_lengths(self.lengths, self.limits, n, rng, self.name)

    @property
    def sessions(self) -> bool:
        """Whether the workload sends multi-turn sessions."""
        return self.turns is not None

    def sample(self, n: int, rng: np.random.Generator) -> list[RequestSpec]:
        """``n`` requests (with ``turns``: sessions that send ``n`` requests in all); prompt texts are
        unique within the call and across calls (``fresh_salt``)."""
        if self.turns is not None:
            return cut_to_requests(self._sessions(rng, n), n)
        prompts, outputs = self.sample_lengths(n, rng)
        salt = fresh_salt(rng)
        return [
            self.spec(int(p), int(o), salt + i, f"{self.name}-{salt:010x}-{i}")
            for i, (p, o) in enumerate(zip(prompts, outputs, strict=True))
        ]

    def sample_sessions(self, k: int, rng: np.random.Generator) -> list[RequestSpec]:
        """``k`` sessions (``k`` single requests without ``turns``)."""
        return self._sessions(rng, k) if self.turns is not None else self.sample(k, rng)

    def _sessions(self, rng: np.random.Generator, sessions: int) -> list[RequestSpec]:
        assert self.turns is not None
        counts = [max(int(t), 1) for t in self.turns.sample(sessions, rng)]
        prompts, outputs = self.sample_lengths(len(counts), rng)
        later = sum(counts) - len(counts)
        source = replace(self, lengths=self.followup_lengths or self.lengths, turns=None)
        messages, answers = source.sample_lengths(later, rng)
        thinks = self.think_time.sample(later, rng)
        salt = fresh_salt(rng)
        specs, used = [], 0
        for i, count in enumerate(counts):
            first = self.spec(int(prompts[i]), int(outputs[i]), salt + i, f"{self.name}-{salt:010x}-{i}")
            rows = range(used, used + count - 1)
            used += count - 1
            keys = (salt + len(counts) + row for row in rows)
            follow = [
                self._follow_up(int(messages[row]), int(answers[row]), float(thinks[row]), key)
                for row, key in zip(rows, keys, strict=True)
            ]
            specs.append(replace(first, followups=self.limits.fit_followups(first, follow)))
        return specs

    def _follow_up(self, tokens: int, output: int, think: float, key: int) -> FollowUp:
        text, intended = self.builder.text(tokens, key)
        return FollowUp(text, output, intended, think)

    def stream(self, rng: np.random.Generator, *, batch: int = 256) -> Iterator[RequestSpec]:
        """An endless, lazy supply of requests (sessions with ``turns``) for loads whose length is a
        duration. It draws in batches, so its first ``n`` requests differ from ``sample(n, rng)``."""
        if self.turns is not None:
            while True:
                yield from self._sessions(rng, batch)
        salt = fresh_salt(rng)
        index = 0
        while True:
            prompts, outputs = self.sample_lengths(batch, rng)
            for p, o in zip(prompts, outputs, strict=True):
                yield self.spec(int(p), int(o), salt + index, f"{self.name}-{salt:010x}-{index}")
                index += 1

    def spec(
        self, prompt_tokens: int, output_tokens: int, key: int, request_id: str | None = None
    ) -> RequestSpec:
        """One request of exactly these lengths (``key`` makes its prompt unique)."""
        extras: dict[str, Any] = {"extra_body": self.extra_body, "tool_calls": self.tool_calls}
        if self.api != "completions":
            messages, intended = self.builder.chat(prompt_tokens, key)
            return RequestSpec(messages[-1][1], output_tokens, intended, messages, request_id, **extras)
        text, intended = self.builder.text(prompt_tokens, key)
        return RequestSpec(text, output_tokens, intended, None, request_id, **extras)

    def describe(self) -> str:
        """One line a person reads: lengths, filters, prompts, api, sessions and tool calls."""
        filters = self.limits.describe()
        exactness = "exact" if self.prompt_tokens_exact else "approximate"
        text = (
            f"{self.name}: {self.lengths.describe()}; filters {filters}; {exactness} prompts; api {self.api}"
        )
        if self.turns is not None:
            text += f"; sessions of {self.turns.describe()} turns, think time {self.think_time.describe()}"
        return text + ("; tool calls" if self.tool_calls else "")


def fresh_salt(rng: np.random.Generator) -> int:
    """A salt for the prompt keys of one call: drawn from ``rng`` (so the seed's stream, and every
    length and arrival drawn after it, stay what the seed makes them) and mixed with the OS's
    randomness, so that a second run with the same seed sends new prompt texts. Identical texts would
    be served from the engine's prefix cache (llama.cpp's prompt cache, vLLM's automatic prefix
    caching): against llama.cpp a repeated bench run had 99.6% of its prompt tokens cached."""
    return int(rng.integers(0, 2**40)) ^ secrets.randbits(40)


class PlanStoppedError(Exception):
    """Planning was told to stop (its caller gave it up: ``specs_with_lengths``'s ``stop``)."""


STOP_CHECK_EVERY = 1024  # specs between two looks at a planner's stop event (~15-20 ms of work)


def specs_with_lengths(
    workload: Workload,
    lengths: Sequence[tuple[int, int]],
    *,
    salt: int = 0,
    stop: threading.Event | None = None,
) -> list[RequestSpec]:
    """Requests of given (prompt, output) lengths in order (e.g. a trace replayed row by row); a
    ``PlanStoppedError`` once ``stop`` is set (looked at every ``STOP_CHECK_EVERY`` specs)."""
    specs: list[RequestSpec] = []
    for i, (p, o) in enumerate(lengths):
        if stop is not None and i % STOP_CHECK_EVERY == 0 and stop.is_set():
            raise PlanStoppedError(f"planning stopped after {i} of {len(lengths)} requests")
        specs.append(workload.spec(p, o, salt + i, f"{workload.name}-{salt:010x}-{i}"))
    return specs


def with_sessions(workload: Workload, options: WorkloadOptions) -> Workload:
    """``workload`` with the sessions, tool calls and structured output of ``options``."""
    changes: dict[str, Any] = {"tool_calls": options.tool_calls or workload.tool_calls}
    if options.turns is not None:
        changes["turns"] = None if options.single_requests() else options.turns
    if options.think_time is not None:
        changes["think_time"] = options.think_time
    if options.response_format is not None:
        changes["extra_body"] = (("response_format", json.loads(options.response_format)),)
    return replace(workload, **changes)
