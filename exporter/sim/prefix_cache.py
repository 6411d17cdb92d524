"""The engine's prefix cache: KV blocks of recently served token sequences, evicted least recently used.

As vLLM's automatic prefix caching does, a *full* block of ``block_size`` tokens is keyed by a hash of
its own tokens and of every token before it (a hash chain), so a block matches only when the whole
prefix up to it is the same. A new request looks up its prompt's blocks in order and stops at the first
miss; the tokens of the leading hits skip the prefill (the engine starts the request's prefill at that
offset, so the cost model charges only the rest, and the attention of the rest over the cached part).
At least the last prompt token is always computed, since the first output token is sampled from it.

Blocks are inserted when a prompt's prefill completes, and prompt plus output when a request finishes,
so a conversation's next turn (the previous prompt, the answer exactly as streamed, a new message)
finds everything up to its new message. The cache holds ``capacity`` blocks apart from the running
requests' KV accounting (a simplification: vLLM keeps cached blocks in its free pool). Pure, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """The hash chain of the full blocks of ``token_ids`` (a trailing partial block has none)."""
    hashes: list[int] = []
    previous = 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        previous = hash((previous, tuple(token_ids[start : start + block_size])))
        hashes.append(previous)
    return hashes


class PrefixCache:
    """An LRU set of block hashes; ``match`` counts the leading hits of a chain."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"prefix cache capacity must be >= 1 block, got {capacity}")
        self.capacity = capacity
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of ``hashes`` are cached (those become most recently used)."""
        hits = 0
        for value in hashes:
            if value not in self._blocks:
                break
            self._blocks.move_to_end(value)
            hits += 1
        return hits

    def insert(self, hashes: Sequence[int]) -> None:
        """Cache ``hashes`` (most recently used), evicting the least recently used beyond capacity."""
        for value in hashes:
            self._blocks[value] = None
            self._blocks.move_to_end(value)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
