"""How many tokens each content chunk carried: best source first, reconciled with the final usage.

A chunk can carry several tokens (vLLM's ``stream_interval``, speculative decoding, a client that fell
behind), and ``exporter.stats`` needs the count: a chunk of ``k`` tokens is its gap plus ``k - 1`` zero gaps.
The source is chosen on a request's first content chunk, best first, and recorded in
``ProbeResult.token_source``:

1. ``TOKEN_IDS``: the chunk lists its token ids (vLLM with ``return_token_ids``): exact.
2. ``CONTINUOUS_USAGE``: the chunk carries a cumulative output token count: ``usage.completion_tokens``
   (vLLM's ``stream_options.continuous_usage_stats``) or ``timings.predicted_n`` (llama.cpp, when the
   request asks for ``timings_per_token``: add it to the target's ``extra_body``); the count is the
   increase since the previous token event: exact, as far as the server's count is.
3. ``TOKENIZER``: a local ``tokenizer.json`` (the optional ``tokenizers`` package) counts the chunk's
   text. Approximate: a BPE merge can span a chunk boundary.
4. ``CHUNKS``: one token per content chunk.

A later chunk that lacks the chosen source's field falls back to the tokenizer, else to one token
(``fallback_chunks`` counts them).

**Held-back tokens.** A server that detokenizes incrementally holds back a token whose text is an
incomplete UTF-8 sequence (a byte-fallback token, part of an emoji or a CJK character) and sends its
chunk with the token id but empty text; the text follows with a later token. vLLM does this (seen in a
quarter of the requests of a random-weight model, whose output is full of byte tokens). Such tokens
count with the next content chunk, when their text reaches the user (``hold``); with
``CONTINUOUS_USAGE`` the next chunk's usage increase already includes them. Tokens still held when the
stream ends (it stopped at ``max_tokens`` mid-character) never show: ``held_at_end`` gives them to the
last content chunk, so the total stays the server's.

**Reconciliation rule** (sources 3 and 4, and any request with fallbacks): when the server reports a
final ``usage.completion_tokens`` U and the chunk counts sum to S (content tokens only; reasoning tokens
counted the same way are subtracted from U first):

* U > S (chunks held several tokens): the ``U - S`` missing tokens are spread evenly over the chunks in
  order, Bresenham-style: chunk ``i`` (of ``n``) gets ``floor((i+1)(U-S)/n) - floor(i(U-S)/n)`` more.
* U < S (the tokenizer over-counted): ``S - U`` tokens are taken from the chunks holding more than one,
  in proportion to their excess (same spreading); a chunk never drops below one token, so if every chunk
  already holds one (more content chunks than the server says tokens) the counts stay as they are.

*Its error.* The total is then exact, so everything computed from the token count and the end times
(TPOT, E2E per token, normalized latency, output tokens/s, fluidity's denominator) is exact, and TTFT and
every chunk's arrival time are measured, not estimated. What can be wrong is only *which* chunk held the
extra tokens: each misplaced token moves one zero-gap token (one ``Dd`` of fluidity slack) from its true
chunk to another, so per-token TBT counts and fluidity's missed-deadline count can be off by at most the
number of misplaced tokens, which is at most ``|U - S|`` (recorded, signed, in
``ProbeResult.token_adjustment``; 0 means the counts needed no correction). When the server sends chunks
of a constant size k (a fixed stream interval), the spread is exact: every chunk gets k.
Without a reported U nothing is reconciled, and with ``CHUNKS`` the count is a lower bound.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

from exporter.streams.openai import Chunk
from exporter.streams.result import TokenSource

TextCounter = Callable[[str], int]


def spread(amount: int, weights: list[int]) -> list[int]:
    """Split ``amount`` over ``len(weights)`` slots in proportion to ``weights``, as integers that sum to
    ``amount``, each slot's share within one of its exact share (Bresenham)."""
    total = sum(weights)
    shares: list[int] = []
    cumulative = given = 0
    for weight in weights:
        cumulative += weight
        upto = cumulative * amount // total if total else 0
        shares.append(upto - given)
        given = upto
    return shares


def reconcile(counts: list[int], reported: int) -> tuple[list[int], int]:
    """Counts adjusted to sum to ``reported`` by the rule above, and the signed adjustment applied."""
    if not counts:
        return counts, 0
    deficit = reported - sum(counts)
    if deficit > 0:
        extra = spread(deficit, [1] * len(counts))
        return [c + e for c, e in zip(counts, extra, strict=True)], deficit
    excess = [c - 1 for c in counts]
    removable = min(-deficit, sum(excess))
    if removable <= 0:
        return counts, 0
    taken = spread(removable, excess)
    return [c - t for c, t in zip(counts, taken, strict=True)], -removable


@lru_cache(maxsize=4)
def load_tokenizer(path: str) -> TextCounter:
    """A text -> token count function from a Hugging Face ``tokenizer.json`` (needs the ``tokenizer``
    extra: ``pip install 'fluidity-exporter[tokenizer]'``)."""
    try:
        from tokenizers import Tokenizer  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise ValueError(
            f"tokenizer_file {path}: the tokenizers package is not installed; "
            "install the extra: pip install 'fluidity-exporter[tokenizer]'"
        ) from exc
    try:
        tokenizer = Tokenizer.from_file(path)
    except Exception as exc:  # the library raises bare Exception subclasses for unreadable files
        raise ValueError(f"tokenizer_file {path}: cannot load it: {exc}") from exc

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count


class TokenCounter:
    """Per request: the tokens of each content (or reasoning) chunk, and the final reconciliation."""

    __slots__ = ("_base", "_held", "_text_counter", "fallback_chunks", "reasoning_tokens", "source")

    def __init__(self, text_counter: TextCounter | None = None) -> None:
        self._text_counter = text_counter
        self._base = 0  # cumulative usage.completion_tokens at the previous token event
        self._held = 0  # token ids of text-less chunks, not yet given to a content chunk
        self.source: TokenSource | None = None
        self.fallback_chunks = 0
        self.reasoning_tokens = 0

    def _choose(self, chunk: Chunk) -> TokenSource:
        if chunk.token_ids:
            return TokenSource.TOKEN_IDS
        if chunk.completion_tokens is not None:
            return TokenSource.CONTINUOUS_USAGE
        return self._text_source()

    def _text_source(self) -> TokenSource:
        return TokenSource.TOKENIZER if self._text_counter is not None else TokenSource.CHUNKS

    def count(self, chunk: Chunk) -> int:
        """Tokens carried by a content or reasoning chunk (at least one)."""
        source = self.source
        if source is None:
            source = self.source = self._choose(chunk)
        if source is TokenSource.TOKEN_IDS and chunk.token_ids:
            tokens, self._held = chunk.token_ids + self._held, 0
        elif source is TokenSource.CONTINUOUS_USAGE and chunk.completion_tokens is not None:
            tokens = max(chunk.completion_tokens - self._base, 1)
        else:
            tokens = self._by_text(chunk.text or chunk.reasoning, source)
        self._base += tokens
        if not chunk.text:
            self.reasoning_tokens += tokens
        return tokens

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """``count`` of each of ``texts``, in order, each the content of a chunk that carries it and
        nothing else (no token ids, no usage): the plain chunk nearly every token is
        (``chunk_shapes.py``)."""
        source = self.source
        if source is None:  # what _choose says of such a chunk
            source = self.source = self._text_source()
        if source is not TokenSource.CHUNKS and source is not TokenSource.TOKENIZER:
            self.fallback_chunks += len(texts)
        counter = self._text_counter
        counts = [1] * len(texts) if counter is None else [max(counter(text), 1) for text in texts]
        self._base += sum(counts)
        return counts

    def _by_text(self, text: str, source: TokenSource) -> int:
        if source is not TokenSource.CHUNKS and source is not TokenSource.TOKENIZER:
            self.fallback_chunks += 1
        counter = self._text_counter
        return 1 if counter is None else max(counter(text), 1)

    def hold(self, chunk: Chunk) -> None:
        """A chunk without text that lists token ids: held-back tokens (see the module docstring)."""
        if chunk.token_ids and self.source in (None, TokenSource.TOKEN_IDS):
            self._held += chunk.token_ids

    def held_at_end(self, reported: int | None) -> int:
        """Tokens the server generated after the last content chunk, whose text never came (none when
        the counts are reconciled: the reconciliation already brings the total to the server's)."""
        if self.needs_reconciling():
            return 0
        if self.source is TokenSource.TOKEN_IDS:
            return self._held
        if self.source is TokenSource.CONTINUOUS_USAGE and reported is not None:
            return max(reported - self._base, 0)
        return 0

    def needs_reconciling(self) -> bool:
        """Whether the counts are estimates that the final usage should correct."""
        estimated = self.source in (TokenSource.TOKENIZER, TokenSource.CHUNKS)
        return estimated or self.fallback_chunks > 0
