"""Prompts of a target length in tokens, each unique, as plain text or as chat messages.

Servers cache prompt prefixes (vLLM's automatic prefix caching, SGLang's radix cache), so two requests
that share a beginning skip part of their prefill and their TTFT says nothing about the workload. Every
prompt here therefore *starts* with a short prefix spelled from a per-request ``key`` (distinct keys
give distinct prefixes), followed by filler text sliced from a long pseudo-random base text.

* ``SimPromptBuilder`` is exact for the built-in simulator's tokenizer (``exporter.sim.tokenizer``):
  there every ``" xyz"`` piece (a space and three lowercase letters) is one token, so a prompt of ``n``
  pieces is ``n`` tokens. The prefix is three such pieces spelling ``key`` in base 26**3 (about 5e12
  distinct prefixes); prompts shorter than three tokens use fewer. For chat, the simulator's template
  (``render_chat``) adds 14 tokens around one user message, which the builder subtracts; a target
  below that overhead yields the shortest possible chat prompt (one content token), and the returned
  count says so.
* ``ApproxPromptBuilder`` is for any other server, whose tokenizer we do not have. It writes common
  lowercase English words, each preceded by a space, which are single tokens in the BPE vocabularies
  of the model families we target (Llama 2/3, Mistral, Qwen, GPT-4-class): so words ≈ tokens, with
  ``tokens_per_word`` (default 1.0) to correct for a tokenizer that splits them. It is *approximate*
  (``exact`` is False): the intended count is an estimate, the chat template's own tokens are not
  included, and reports should compare it with the server's reported ``usage.prompt_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Protocol, runtime_checkable

import numpy as np

from exporter.sim import tokenizer
from exporter.streams.request import Api, RequestSpec

Messages = tuple[tuple[str, str], ...]

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_PIECES = 26**3  # distinct " xyz" pieces, each one simulator token
_PREFIX_TOKENS = 3
# Base text for filler: extended on demand, sliced per request at an offset derived from its key.
_OFFSET_SPAN = 4096


@runtime_checkable
class PromptBuilder(Protocol):
    """Builds a unique prompt of about ``n_tokens`` tokens for request ``key``."""

    @property
    def exact(self) -> bool:
        """Whether the returned token counts are exact for the target's tokenizer."""
        ...

    def text(self, n_tokens: int, key: int) -> tuple[str, int]:
        """A completions prompt and its intended token count."""
        ...

    def chat(self, n_tokens: int, key: int) -> tuple[Messages, int]:
        """Chat messages and their intended prompt token count (template included where known)."""
        ...


def _piece(value: int) -> str:
    """The ``" xyz"`` piece for ``value`` in ``[0, 26**3)``."""
    high, rest = divmod(value, 26 * 26)
    mid, low = divmod(rest, 26)
    return " " + _LETTERS[high] + _LETTERS[mid] + _LETTERS[low]


def _key_digits(key: int, base: int, count: int) -> list[int]:
    digits = []
    for _ in range(count):
        key, digit = divmod(key, base)
        digits.append(digit)
    return digits


@dataclass
class SimPromptBuilder:
    """Exact prompts for the built-in simulator's tokenizer."""

    seed: int = 0
    _base: str = field(default="", init=False, repr=False)

    @property
    def exact(self) -> bool:
        return True

    def _filler(self, n_pieces: int, key: int) -> str:
        offset = key % _OFFSET_SPAN
        needed = offset + n_pieces
        if len(self._base) < 4 * needed:
            # Every piece is 4 characters, so slicing the base text by 4 cuts exactly at tokens.
            self._base = tokenizer.prompt_of_length(max(needed, 2 * len(self._base) // 4), self.seed)
        return self._base[4 * offset : 4 * needed]

    def text(self, n_tokens: int, key: int) -> tuple[str, int]:
        if n_tokens < 0:
            raise ValueError(f"prompt length must be >= 0 tokens, got {n_tokens}")
        prefix_len = min(_PREFIX_TOKENS, n_tokens)
        prefix = "".join(_piece(d) for d in _key_digits(key, _PIECES, prefix_len))
        return prefix + self._filler(n_tokens - prefix_len, key), n_tokens

    def chat(self, n_tokens: int, key: int) -> tuple[Messages, int]:
        # Content starts with a space piece and ends with letters, so the template's tokens and the
        # content's add up exactly (the tests check this against ``count_chat_tokens``).
        content, content_tokens = self.text(max(n_tokens - chat_overhead(), 1), key)
        return (("user", content),), content_tokens + chat_overhead()


@lru_cache(maxsize=1)
def chat_overhead() -> int:
    """Tokens the simulator's chat template adds around one user message."""
    return tokenizer.count_chat_tokens([{"role": "user", "content": ""}])


# Common English words that BPE vocabularies hold as single tokens when preceded by a space.
_WORD_TEXT = """
    the of and to in is was for on that with as by at from his her it an are were which be this
    had not or have but one all their they has been would there can more two who we she when if
    will other its time into only new some could these may then do first any my now such like our
    over man me even most made after also did many before must through back years where much your
    way well down should because each just those people how too little state good very make world
    still own see men work long get here between both life being under never day same another know
    while last might us great old year off come since against go came right used take three states
    himself few house use during without again place around however home small found thought went
    say part once general high upon school every door does got united left number course war until
    always away something fact though water less public put think almost hand enough far took head
    yet government system better set told nothing night end why called kind find going look asked
    later knew point next city business give group toward young days let room president side social
    given present several order national possible rather second face per among form important often
    things looked early white case land become large big need four within felt along children saw
    best church ever least power development light
"""
WORDS = tuple(_WORD_TEXT.split())


@dataclass
class ApproxPromptBuilder:
    """Approximate prompts for servers whose tokenizer we do not have (words ≈ tokens).

    ``tokens_per_word`` and ``overhead_tokens`` (a chat template's own tokens) come from
    ``exporter.load.calibration`` when the server's counts were measured: ``n`` tokens are then
    ``(n - overhead_tokens) / tokens_per_word`` words."""

    tokens_per_word: float = 1.0
    seed: int = 0
    overhead_tokens: float = 0.0
    _base: list[str] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.tokens_per_word > 0:
            raise ValueError(f"tokens_per_word must be > 0, got {self.tokens_per_word!r}")

    @property
    def exact(self) -> bool:
        return False

    def _filler(self, n_words: int, key: int) -> list[str]:
        offset = key % _OFFSET_SPAN
        needed = offset + n_words
        if len(self._base) < needed:
            rng = np.random.default_rng(self.seed)
            picks = rng.integers(0, len(WORDS), size=max(needed, 2 * len(self._base)))
            self._base = [WORDS[i] for i in picks]
        return self._base[offset:needed]

    def text(self, n_tokens: int, key: int) -> tuple[str, int]:
        if n_tokens < 0:
            raise ValueError(f"prompt length must be >= 0 tokens, got {n_tokens}")
        # A prompt of at least one token has at least one word: vLLM refuses an empty one (400), and
        # an overhead read a few tokens high turned prompts of a few tokens into none.
        n_words = max(round((n_tokens - self.overhead_tokens) / self.tokens_per_word), min(n_tokens, 1))
        prefix_len = min(_PREFIX_TOKENS, n_words)
        prefix = [WORDS[d] for d in _key_digits(key, len(WORDS), prefix_len)]
        words = prefix + self._filler(n_words - prefix_len, key)
        return " " + " ".join(words) if words else "", n_tokens

    def chat(self, n_tokens: int, key: int) -> tuple[Messages, int]:
        content, intended = self.text(n_tokens, key)
        return (("user", content.lstrip()),), intended


def first_token_spec(builder: PromptBuilder, api: Api, tokens: int, key: int, request_id: str) -> RequestSpec:
    """A request of a ``tokens``-token prompt (drawn with ``key``) that asks for one output token: what
    prompt calibration and prefill profiling time (chat sends it as the last user message)."""
    if api == "chat":
        messages, intended = builder.chat(tokens, key)
        return RequestSpec(messages[-1][1], 1, intended, messages, request_id)
    text, intended = builder.text(tokens, key)
    return RequestSpec(text, 1, intended, None, request_id)
