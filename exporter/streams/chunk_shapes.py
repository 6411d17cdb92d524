"""The common shapes of a completions or chat chunk, decoded straight into typed structs (msgspec).

Every content chunk takes this path, so it is the client's per-token cost: decoding into structs that
name only the fields ``read_chunk`` looks at skips the rest of the chunk (ids, model, logprobs) without
building a dict or a string for it, and reading attributes is cheaper than ``dict.get``. Measured on a
vLLM-shaped completions chunk: ~1 us for this path against ~2.5 us for ``msgspec`` to dicts plus
``read_chunk``.

It must say exactly what ``openai.read_chunk`` says, so it declines (returns None, and the caller
takes the general path) whenever the general reading has a decision to make: a field of an unexpected
type (msgspec refuses it: no coercion), an ``error`` object, llama.cpp's ``timings``, tool calls, or
anything that is not an object. The equality of both paths is tested chunk by chunk
(``tests/streams/test_chunk_shapes.py``).

A *plain* chunk, content text and nothing else that ``read_chunk`` looks at (no usage, token ids,
finish reason, reasoning or tool call), comes back as that text alone, a ``str``: it is what nearly
every token of a stream is, and ``StreamState.on_payload`` accounts for it without building a ``Chunk``
(the replay of a 64-token stream spends ~1 us less per token than through a ``Chunk``).

A stream's plain chunks differ in their text alone (vLLM, SGLang and OpenAI repeat the id, the time
and the model in every chunk), so one decoded chunk is a *template* for the rest (``plain_template``):
the bytes before its text's string and after it. Any event data that is that prefix, JSON string
content with nothing escaped, and that suffix is a plain chunk whose text is that content, since only
the string's content changed, and the template was shown to read a content of its own as the text.
The C reads keep such events as their text (``socket_reads.KeepMode``), and their tokens cost no JSON
decoding at all. Anything else (an escaped character, a field that changed: llama.cpp's ``created``,
each second) is decoded here as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

import msgspec

from exporter.streams.openai import Chunk

_UNSET = msgspec.UNSET


class _CachedTokens(msgspec.Struct, gc=False):
    cached_tokens: int | None = None


class _Usage(msgspec.Struct, gc=False):
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    prompt_tokens_details: _CachedTokens | None = None


class _Delta(msgspec.Struct, gc=False):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: msgspec.Raw | msgspec.UnsetType = _UNSET


class _CompletionChoice(msgspec.Struct, gc=False):
    text: str | None = None
    finish_reason: str | None = None
    token_ids: list[int] | None = None


class _ChatChoice(msgspec.Struct, gc=False):
    delta: _Delta | None = None
    finish_reason: str | None = None
    token_ids: list[int] | None = None


class _CompletionChunk(msgspec.Struct, gc=False):
    choices: list[_CompletionChoice] | msgspec.UnsetType = _UNSET
    usage: _Usage | None = None
    timings: msgspec.Raw | msgspec.UnsetType = _UNSET
    error: msgspec.Raw | msgspec.UnsetType = _UNSET


class _ChatChunk(msgspec.Struct, gc=False):
    choices: list[_ChatChoice] | msgspec.UnsetType = _UNSET
    usage: _Usage | None = None
    timings: msgspec.Raw | msgspec.UnsetType = _UNSET
    error: msgspec.Raw | msgspec.UnsetType = _UNSET


_decode_completion = msgspec.json.Decoder(_CompletionChunk).decode
_decode_chat = msgspec.json.Decoder(_ChatChunk).decode


_NO_USAGE: tuple[None, None, None] = (None, None, None)


def _usage(usage: _Usage) -> tuple[int | None, int | None, int | None]:
    details = usage.prompt_tokens_details
    cached = details.cached_tokens if details is not None else None
    return usage.completion_tokens, usage.prompt_tokens, cached


def _plain_completion(obj: _CompletionChunk) -> str | None:
    """The text of a plain completions chunk (see the module docstring), else None."""
    if obj.timings is not _UNSET or obj.choices is _UNSET or not obj.choices or obj.usage is not None:
        return None
    choice = obj.choices[0]
    if choice.token_ids is None and choice.finish_reason is None and choice.text:
        return choice.text
    return None


def _plain_chat(obj: _ChatChunk) -> str | None:
    """The content of a plain chat chunk (see the module docstring), else None."""
    if obj.timings is not _UNSET or obj.choices is _UNSET or not obj.choices or obj.usage is not None:
        return None
    choice = obj.choices[0]
    delta = choice.delta
    if (
        delta is None
        or delta.tool_calls is not _UNSET
        or choice.token_ids is not None
        or choice.finish_reason is not None
        or delta.reasoning_content
        or delta.reasoning
    ):
        return None
    return delta.content or None


def completion_chunk(data: str) -> Chunk | str | None:
    """A completions chunk (its text alone when it is plain), or None when ``read_chunk`` must read
    it (see the module docstring)."""
    try:
        obj = _decode_completion(data)
    except msgspec.DecodeError:  # ValidationError too
        return None
    plain = _plain_completion(obj)
    if plain is not None:
        return plain
    if obj.timings is not _UNSET or obj.choices is _UNSET or not obj.choices:
        return None if obj.timings is not _UNSET or obj.error is not _UNSET else _no_choice(obj.usage)
    choice = obj.choices[0]
    usage = obj.usage
    ids = choice.token_ids
    completion, prompt, cached = _NO_USAGE if usage is None else _usage(usage)
    return Chunk(
        choice.text or "",
        "",
        len(ids) if ids is not None else None,
        completion,
        prompt,
        choice.finish_reason,
        cached_tokens=cached,
    )


def chat_chunk(data: str) -> Chunk | str | None:
    """A chat chunk (its content alone when it is plain), or None when ``read_chunk`` must read it
    (see the module docstring)."""
    try:
        obj = _decode_chat(data)
    except msgspec.DecodeError:
        return None
    plain = _plain_chat(obj)
    if plain is not None:
        return plain
    if obj.timings is not _UNSET or obj.choices is _UNSET or not obj.choices:
        return None if obj.timings is not _UNSET or obj.error is not _UNSET else _no_choice(obj.usage)
    choice = obj.choices[0]
    delta = choice.delta
    if delta is not None and delta.tool_calls is not _UNSET:
        return None
    usage = obj.usage
    ids = choice.token_ids
    content = reasoning = ""
    if delta is not None:
        content = delta.content or ""
        reasoning = delta.reasoning_content or delta.reasoning or ""
    completion, prompt, cached = _NO_USAGE if usage is None else _usage(usage)
    return Chunk(
        content,
        reasoning,
        len(ids) if ids is not None else None,
        completion,
        prompt,
        choice.finish_reason,
        cached_tokens=cached,
    )


def _no_choice(usage: _Usage | None) -> Chunk:
    """A chunk without a choice (the usage-only chunk at the end of a stream)."""
    completion, prompt, cached = _NO_USAGE if usage is None else _usage(usage)
    return Chunk(completion_tokens=completion, prompt_tokens=prompt, cached_tokens=cached)


FAST_READERS: dict[str, Callable[[str], Chunk | str | None]] = {
    "/v1/completions": completion_chunk,
    "/v1/chat/completions": chat_chunk,
}


_Shape = TypeVar("_Shape", _CompletionChunk, _ChatChunk)


def _plain_texts(
    decode_lines: Callable[[str], list[_Shape]], plain: Callable[[_Shape], str | None]
) -> Callable[[Sequence[bytes]], list[str]]:
    def read(payloads: Sequence[bytes]) -> list[str]:
        """The texts of the leading plain chunks among ``payloads``, each the data of one lone event
        (so without a line break: one JSON document per line), all decoded in one call."""
        try:
            # Decoded first, as on_payload does: msgspec checks the UTF-8 of the fields it reads only.
            objs = decode_lines(b"\n".join(payloads).decode("utf-8"))
        except (msgspec.DecodeError, UnicodeDecodeError):
            return []
        if len(objs) != len(payloads):  # an empty payload is no line at all
            return []
        texts: list[str] = []
        for obj in objs:
            text = plain(obj)
            if text is None:
                break
            texts.append(text)
        return texts

    return read


# The same reading as FAST_READERS of many payloads at once, for their leading plain chunks: what a
# kept stream nearly always is (reader.py, keep mode in socket_reads.py).
PLAIN_BATCH_READERS: dict[str, Callable[[Sequence[bytes]], list[str]]] = {
    "/v1/completions": _plain_texts(msgspec.json.Decoder(_CompletionChunk).decode_lines, _plain_completion),
    "/v1/chat/completions": _plain_texts(msgspec.json.Decoder(_ChatChunk).decode_lines, _plain_chat),
}


# What JSON must escape in a string (a quote, a backslash, a control character): a text holding any of
# them is not found as itself in a chunk, and content holding one is not a template's text.
_ESCAPED = re.compile(r'["\\\x00-\x1f]')
_TEMPLATE_CHECK = "fluidity template check"  # a text put in a template's slot, to see it read back


def plain_template(path: str, data: bytes, text: str) -> tuple[bytes, bytes] | None:
    """The template of the plain chunks like ``data`` (the event data of a plain chunk whose text is
    ``text``, on the API at ``path``): the bytes before and after the content of its text's string,
    or None when there is none (the text must be escaped, or is not found as the text).

    Each place where the text stands as a string is tried: the one whose content, replaced, is read
    back (``FAST_READERS``) as the plain chunk's new text is the text's (an id or a model name can
    equal the text). Any other content with nothing escaped is then read the same way: the JSON around
    it is the same, token for token."""
    read = FAST_READERS.get(path)
    if read is None or not text or _ESCAPED.search(text):
        return None
    try:
        quoted = b'"' + text.encode("utf-8") + b'"'
    except UnicodeEncodeError:  # a lone surrogate, which only a \u escape can have written
        return None
    start = data.find(quoted)
    # Another text than the chunk's: else every place holding the same string would read it back.
    check = _TEMPLATE_CHECK if text != _TEMPLATE_CHECK else _TEMPLATE_CHECK + "!"
    while start >= 0:
        prefix, suffix = data[: start + 1], data[start + len(quoted) - 1 :]
        try:
            read_back = read((prefix + check.encode() + suffix).decode("utf-8"))
        except UnicodeDecodeError:
            return None
        if read_back == check:
            return prefix, suffix
        start = data.find(quoted, start + 1)
    return None
