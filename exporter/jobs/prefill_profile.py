"""Prefill profiling, as Etalon does it: what TTFT deadline is fair for a prompt of length P here?

Requests go one at a time (nothing else in flight from us, so the TTFT is prefill plus the system's own
overhead, not queueing), across a ladder of prompt lengths, each asking for a single output token and
each with a unique prompt (a prompt cache would otherwise answer repeats instantly). The minimum TTFT per
length is the least noisy estimate of the prefill time; ``exporter.stats.prefill`` fits the model, and
``Dp(P) = predicted(P) + scheduling slack`` becomes the prefill deadline.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.load.prompts import PromptBuilder, first_token_spec
from exporter.load.target_facts import usable_context
from exporter.stats.prefill import PrefillModel, fit_prefill_model
from exporter.streams.request import Api, RequestSpec
from exporter.streams.result import Outcome, ProbeResult, ttft

Send = Callable[[RequestSpec], Awaitable[ProbeResult]]
OnSample = Callable[["LengthSample"], None]
RETRY_KEY_BIT = 1 << 41  # a redrawn prompt's key: above the 40 random bits of a run's base


@dataclass
class LengthSample:
    """What one prompt length gave: every TTFT measured, and how the other requests ended."""

    prompt_tokens: int
    ttfts: list[float] = field(default_factory=list)
    reported_prompt_tokens: list[int] = field(default_factory=list)  # what the server counted
    outcomes: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)

    @property
    def best(self) -> float | None:
        """The minimum TTFT: the prefill with the least interference."""
        return min(self.ttfts) if self.ttfts else None

    @property
    def length(self) -> int:
        """The prompt length to fit against: the server's own count when it reported one (chat
        templates add tokens), else the length asked for."""
        reported = sorted(self.reported_prompt_tokens)
        return reported[len(reported) // 2] if reported else self.prompt_tokens


@dataclass
class PrefillProfile:
    """The samples of a profiling run and the model fitted to their minima."""

    samples: list[LengthSample]
    model: PrefillModel | None
    interrupted: bool = False  # stopped before its last length: a fit of the lengths it finished

    def to_dict(self) -> dict[str, Any]:
        return {
            **({"state": "interrupted"} if self.interrupted else {}),
            "model": self.model.to_dict() if self.model is not None else None,
            "samples": [
                {
                    "prompt_tokens": s.prompt_tokens,
                    "reported_prompt_tokens": s.length,
                    "min_ttft_s": s.best,
                    "ttfts_s": s.ttfts,
                    "outcomes": dict(s.outcomes),
                    "errors": s.errors[:3],
                }
                for s in self.samples
            ],
        }


@dataclass(frozen=True)
class ProfileRequests:
    """What a profile sends: ``repeats`` isolated one-token requests of each of ``lengths`` prompt
    tokens, in order, their prompts from ``builder`` in ``api``'s shape."""

    builder: PromptBuilder
    api: Api
    lengths: Sequence[int]
    repeats: int = 3

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")


async def profile_prefill(
    send: Send,
    requests: ProfileRequests,
    on_sample: OnSample | None = None,
    on_interrupt: Callable[[PrefillProfile], None] | None = None,
) -> PrefillProfile:
    """Send ``requests`` through ``send`` and fit the model. Stopped from outside (cancelled, Ctrl-C,
    SIGTERM), it tells ``on_interrupt`` the lengths it finished, fitted (``interrupted``), and stops as
    told.

    A length whose every request failed (e.g. longer than the model's context: a 400) is kept in the
    samples with its outcomes and left out of the fit. A request answered without a content token
    (``no_tokens``) is counted and sent once more with a new prompt.
    """
    samples: list[LengthSample] = []
    try:
        return await _profile(send, requests, on_sample, samples)
    except (asyncio.CancelledError, KeyboardInterrupt):
        if on_interrupt is not None:
            on_interrupt(PrefillProfile(list(samples), fit(samples), interrupted=True))
        raise


async def _profile(
    send: Send, requests: ProfileRequests, on_sample: OnSample | None, samples: list[LengthSample]
) -> PrefillProfile:
    # Fresh prompt texts per run: a repeated profile must not find its prompts in the engine's prefix
    # cache, or its TTFTs would measure a cache hit instead of a prefill.
    base = secrets.randbits(40)
    builder, api = requests.builder, requests.api
    for index, length in enumerate(requests.lengths):
        sample = LengthSample(length)
        for attempt in range(requests.repeats):
            key = base + index * 1000 + attempt
            result = await send(first_token_spec(builder, api, length, key, f"profile-{length}-{key}"))
            if result.outcome is Outcome.NO_TOKENS:
                # The model's one token had no text (measured on llama.cpp: one prompt in ~150 gives a
                # token that is a piece of a multi-byte character, streamed as ""), so nothing was timed.
                # The prefill is what is measured, not the model's choice: one more prompt is drawn.
                _record(sample, result)
                key |= RETRY_KEY_BIT
                result = await send(first_token_spec(builder, api, length, key, f"profile-{length}-{key}"))
            _record(sample, result)
        samples.append(sample)
        if on_sample is not None:
            on_sample(sample)
    return PrefillProfile(samples, fit(samples))


def fit_ladder(ladder: Sequence[int], context: int | None, exact: bool) -> tuple[tuple[int, ...], list[int]]:
    """The lengths that fit the target's ``context`` with their one output token, and those left out (a
    default ladder to 16384 sent two requests the default 8192-token simulator must refuse); the top
    becomes the longest prompt that fits. Calibrated prompts keep a margin for their residual error."""
    if context is None:
        return tuple(ladder), []
    room = usable_context(context, exact) - 1
    kept = tuple(length for length in ladder if length <= room)
    left_out = [length for length in ladder if length > room]
    if left_out and room not in kept and room > (kept[-1] if kept else 0):
        kept = (*kept, room)
    return kept, left_out


def left_out_note(left_out: Sequence[int], context: int | None) -> str:
    """What an operator reads about the lengths ``fit_ladder`` left out."""
    return (
        f"prompt lengths {', '.join(map(str, left_out))} left out: the server's context is {context} tokens"
    )


def constant_note(model: PrefillModel) -> str | None:
    """A warning when the model was fitted on one length: a constant, which cannot show how TTFT grows
    with the prompt (None for a curve)."""
    if model.sample_count > 1:
        return None
    return "one prompt length answered: the model is a constant TTFT; give two lengths or more for a curve"


def fit(samples: Sequence[LengthSample]) -> PrefillModel | None:
    """The prefill model over the lengths that answered (None when none did)."""
    usable = [(s.length, s.best) for s in samples if s.best is not None]
    if not usable:
        return None
    return fit_prefill_model([p for p, _ in usable], [t for _, t in usable])


def _record(sample: LengthSample, result: ProbeResult) -> None:
    sample.outcomes[result.outcome.value] += 1
    first = ttft(result, include_reasoning=True)
    if result.ok and first is not None:
        sample.ttfts.append(first)
        if result.prompt_tokens_reported:
            sample.reported_prompt_tokens.append(result.prompt_tokens_reported)
    elif result.error:
        sample.errors.append(result.error)
