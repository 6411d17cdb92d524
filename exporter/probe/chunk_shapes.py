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
(``tests/probe/test_chunk_shapes.py``).

A *plain* chunk, content text and nothing else that ``read_chunk`` looks at (no usage, token ids,
finish reason, reasoning or tool call), comes back as that text alone, a ``str``: it is what nearly
every token of a stream is, and ``StreamState.on_payload`` accounts for it without building a ``Chunk``
(the replay of a 64-token stream spends ~1 us less per token than through a ``Chunk``).
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from exporter.probe.openai import Chunk

_UNSET = msgspec.UNSET


class _CachedTokens(msgspec.Struct):
    cached_tokens: int | None = None


class _Usage(msgspec.Struct):
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    prompt_tokens_details: _CachedTokens | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: msgspec.Raw | msgspec.UnsetType = _UNSET


class _CompletionChoice(msgspec.Struct):
    text: str | None = None
    finish_reason: str | None = None
    token_ids: list[int] | None = None


class _ChatChoice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None
    token_ids: list[int] | None = None


class _CompletionChunk(msgspec.Struct):
    choices: list[_CompletionChoice] | msgspec.UnsetType = _UNSET
    usage: _Usage | None = None
    timings: msgspec.Raw | msgspec.UnsetType = _UNSET
    error: msgspec.Raw | msgspec.UnsetType = _UNSET


class _ChatChunk(msgspec.Struct):
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


def completion_chunk(data: str) -> Chunk | str | None:
    """A completions chunk (its text alone when it is plain), or None when ``read_chunk`` must read
    it (see the module docstring)."""
    try:
        obj = _decode_completion(data)
    except msgspec.DecodeError:  # ValidationError too
        return None
    if obj.timings is not _UNSET or obj.choices is _UNSET or not obj.choices:
        return None if obj.timings is not _UNSET or obj.error is not _UNSET else _no_choice(obj.usage)
    choice = obj.choices[0]
    usage = obj.usage
    ids = choice.token_ids
    if usage is None and ids is None and choice.finish_reason is None and choice.text:
        return choice.text
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
        if usage is None and ids is None and choice.finish_reason is None and content and not reasoning:
            return content
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
