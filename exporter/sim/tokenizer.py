"""The simulator's own deterministic tokenizer: text <-> token ids, with no model files.

Vocabulary (``VOCAB_SIZE`` ids):

* ids 0-255 are raw bytes, the fallback for anything that is not a lowercase ASCII letter run;
* the rest are "pieces": one to three lowercase ASCII letters, optionally preceded by one space.

Encoding scans left to right: `` ?[a-z]{1,3}`` becomes one piece token, any other character becomes one
byte token per UTF-8 byte. So ``" abc"`` is one token, ``" hello"`` is two (``" hel"``, ``"lo"``) and
``"Hi!"`` is three. Decoding concatenates the pieces and bytes, so ``decode(encode(text)) == text`` for any
text. Generated tokens are always ``" xyz"`` pieces (space + three letters), so every output token carries
visible text and ``encode(decode(ids)) == ids`` holds for generated ids: a client can count tokens exactly.

``prompt_of_length(n)`` builds a prompt of exactly ``n`` tokens; ``render_chat`` is the chat template whose
token count the server reports as ``usage.prompt_tokens`` for chat requests.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

_LETTERS = "abcdefghijklmnopqrstuvwxyz"
_BYTES = 256
_SIZES = (26, 26 * 26, 26 * 26 * 26)
_OFFSETS = (0, 26, 26 + 26 * 26)
_PIECES = sum(_SIZES)
VOCAB_SIZE = _BYTES + 2 * _PIECES
# The block of generated ids: space + exactly three letters.
_GEN_BASE = _BYTES + _PIECES + _OFFSETS[2]
_GEN_COUNT = _SIZES[2]
_PIECE_RE = re.compile(r" ?[a-z]{1,3}|.", re.DOTALL)
_MASK64 = (1 << 64) - 1


def _letters_value(letters: str) -> int:
    value = 0
    for ch in letters:
        value = value * 26 + (ord(ch) - 97)
    return value


def _piece_id(piece: str) -> int:
    spaced = piece.startswith(" ")
    letters = piece[1:] if spaced else piece
    base = _BYTES + (_PIECES if spaced else 0)
    return base + _OFFSETS[len(letters) - 1] + _letters_value(letters)


def _is_piece(match: str) -> bool:
    return len(match) > 1 or "a" <= match <= "z"


def encode(text: str) -> list[int]:
    """Token ids of ``text``."""
    ids: list[int] = []
    for match in _PIECE_RE.finditer(text):
        piece = match.group()
        if _is_piece(piece):
            ids.append(_piece_id(piece))
        else:
            ids.extend(piece.encode("utf-8"))
    return ids


@lru_cache(maxsize=4096)
def _piece_text(token_id: int) -> str:
    index = token_id - _BYTES
    spaced = index >= _PIECES
    index %= _PIECES
    length = 3 if index >= _OFFSETS[2] else (2 if index >= _OFFSETS[1] else 1)
    value = index - _OFFSETS[length - 1]
    chars = []
    for _ in range(length):
        value, rem = divmod(value, 26)
        chars.append(_LETTERS[rem])
    return (" " if spaced else "") + "".join(reversed(chars))


# Every generated token's text, precomputed once (17,576 short strings): the streaming hot path looks up.
_GEN_TEXT = [_piece_text.__wrapped__(_GEN_BASE + i) for i in range(_GEN_COUNT)]


def decode(ids: Iterable[int]) -> str:
    """Text of token ids; invalid UTF-8 from byte tokens is replaced, as real detokenizers do."""
    out = bytearray()
    for token_id in ids:
        if not 0 <= token_id < VOCAB_SIZE:
            raise ValueError(f"token id {token_id} outside vocabulary 0..{VOCAB_SIZE - 1}")
        if token_id < _BYTES:
            out.append(token_id)
        else:
            out.extend(_piece_text(token_id).encode("ascii"))
    return out.decode("utf-8", errors="replace")


def _mix(seed: int, index: int) -> int:
    # splitmix64: a stable hash across processes (Python's hash() is salted per process).
    z = (seed * 0x9E3779B97F4A7C15 + index + 1) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def generated_token_id(seed: int, index: int) -> int:
    """The ``index``-th output token of a request with ``seed``: always a ``" xyz"`` piece."""
    return _GEN_BASE + _mix(seed, index) % _GEN_COUNT


def generated_text(seed: int, start: int, count: int) -> tuple[list[int], str]:
    """Ids and text of output tokens ``start .. start+count-1`` of a request with ``seed`` (the hot path)."""
    ids = [_GEN_BASE + _mix(seed, index) % _GEN_COUNT for index in range(start, start + count)]
    return ids, "".join([_GEN_TEXT[token_id - _GEN_BASE] for token_id in ids])


def token_text(token_id: int) -> str:
    """Text of one piece token (generated tokens are always pieces)."""
    return _piece_text(token_id) if token_id >= _BYTES else decode([token_id])


def prompt_of_length(n_tokens: int, seed: int = 0) -> str:
    """A prompt that encodes to exactly ``n_tokens`` tokens."""
    return "".join(_piece_text(generated_token_id(seed, i)) for i in range(n_tokens))


def _content_text(content: object) -> str:
    # OpenAI allows content as a string or a list of parts; only text parts count.
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = [p.get("text", "") for p in content if isinstance(p, Mapping)]
        return "".join(str(p) for p in parts)
    return ""


def render_chat(messages: Sequence[Mapping[str, object]]) -> str:
    """The chat template: ``<|role|>content`` per message, then ``<|assistant|>`` to prompt the reply."""
    rendered = [f"<|{m.get('role', '')}|>{_content_text(m.get('content'))}\n" for m in messages]
    return "".join(rendered) + "<|assistant|>"


def count_chat_tokens(messages: Sequence[Mapping[str, object]]) -> int:
    """What the server reports as ``usage.prompt_tokens`` for these chat messages."""
    return len(encode(render_chat(messages)))
