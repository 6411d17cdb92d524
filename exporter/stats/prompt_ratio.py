"""Prompt tokens of a request whose server did not report them, estimated from its body's length.

A prefill deadline may depend on the prompt's length (a profiled ``PrefillModel``), and most user streams
report it (``usage.prompt_tokens``) only when the client asked for usage. For the others the observer
knows only how many bytes the request body had. ``PromptRatio`` learns tokens per body byte from the
requests of the same (model, api) that did report usage, as sums that decay by ``DECAY`` per learnt
request, so the ratio follows a change of prompt mix within about a thousand requests and one odd
request moves it little. Before any request reported, ``DEFAULT_TOKENS_PER_BYTE`` stands in: about four
bytes per token of English text with a BPE tokenizer, which the body's JSON framing makes an estimate
on the high side. Pure values: ``learn`` returns a new ratio.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

DEFAULT_TOKENS_PER_BYTE: Final = 0.25
DECAY: Final = 0.999  # weight kept by the past at each learnt request: ~1000 requests of memory


@dataclass(frozen=True)
class PromptRatio:
    """Decayed sums of reported prompt tokens and of the body bytes of the requests that reported them."""

    tokens: float = 0.0
    body_bytes: float = 0.0

    @property
    def tokens_per_byte(self) -> float:
        """The learnt ratio, or the default before any request with a non-empty body reported."""
        return self.tokens / self.body_bytes if self.body_bytes > 0 else DEFAULT_TOKENS_PER_BYTE

    def learn(self, prompt_tokens: int, body_bytes: int) -> PromptRatio:
        """The ratio after one more request that reported ``prompt_tokens`` for a body of ``body_bytes``
        (an empty body says nothing about the ratio)."""
        if body_bytes <= 0 or prompt_tokens < 0:
            return self
        return PromptRatio(self.tokens * DECAY + prompt_tokens, self.body_bytes * DECAY + body_bytes)

    def estimate(self, body_bytes: int) -> int:
        """The prompt tokens of a body of ``body_bytes`` bytes (at least 1 for a non-empty body)."""
        if body_bytes <= 0:
            return 0
        return max(round(body_bytes * self.tokens_per_byte), 1)
