"""The OpenAI wire formats the probe speaks: ``/v1/completions``, ``/v1/chat/completions`` and
``/v1/responses``.

Each API is one ``ApiFormat`` with the same two functions (build the body, read a parsed chunk), and all
of them sit in one map, ``FORMATS``, keyed by ``Api``; the I/O around them is shared (``client.py``), so
adding an API is adding an entry here. Everything in this module is pure.

What counts as a token: only a *content-bearing* chunk, one whose text (``choices[0].text`` for
completions, ``choices[0].delta.content`` for chat) is non-empty. A chat stream's opening role-only delta,
empty-content chunks, usage-only chunks (``"choices": []``) and ``[DONE]`` are never tokens: counting them
shifts TTFT earlier and adds near-zero inter-token gaps (inference-perf #392). Reasoning text
(``delta.reasoning_content`` in vLLM and DeepSeek, ``delta.reasoning`` in newer vLLM and OpenRouter) is
recorded apart, so TTFT can be reported with or without it.

*Tool calls.* A request that asks for a tool call (``RequestSpec.tool_calls``) carries one tool
definition and a ``tool_choice`` naming it; the answer streams the call's arguments
(``delta.tool_calls[].function.arguments`` in chat, ``response.function_call_arguments.delta`` in the
Responses API) and those argument chunks are its output tokens, timed like text (``Chunk.tool``) and
counted apart. The opening delta that names the function carries no argument text and is no token.

*The Responses API* (``/v1/responses``) streams typed events (``event:`` line and a ``"type"`` field):
``response.output_text.delta`` is content, ``response.reasoning_text.delta`` (and the summary variant)
reasoning; ``response.completed`` ends the stream with the usage (``input_tokens``, ``output_tokens``,
``input_tokens_details.cached_tokens``); ``response.incomplete`` ends it early (for
``max_output_tokens`` that is finish reason ``length``, for anything else an incomplete answer);
``response.failed`` and ``error`` events are in-stream errors. There is no ``[DONE]``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from exporter.settings.target import TargetSettings
from exporter.streams.request import Api, RequestSpec


class Chunk(msgspec.Struct):
    """What one streamed JSON chunk says, independent of the API that sent it. A msgspec Struct: one is
    built per token, and its C-level constructor costs a fifth of a dataclass's (0.13 against 0.67 us)."""

    text: str = ""  # content text ("" when none)
    reasoning: str = ""  # reasoning text ("" when none)
    token_ids: int | None = None  # how many token ids the chunk listed, None when it listed none
    # Cumulative output tokens: usage.completion_tokens when the chunk has usage, else llama.cpp's
    # timings.predicted_n (sent on every chunk when the request asks for ``timings_per_token``).
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None  # an in-stream error object's message
    tool: bool = False  # ``text`` is a tool call's arguments, not content
    cached_tokens: int | None = None  # usage's prompt tokens served from the server's prefix cache
    end: bool = False  # the stream's last event (the Responses API's completed or incomplete event)
    incomplete: str | None = None  # why a response ended incomplete (other than max_output_tokens)

    @property
    def content(self) -> bool:
        """Whether the chunk carries content tokens."""
        return bool(self.text)


Body = dict[str, Any]
BodyBuilder = Callable[[TargetSettings, RequestSpec, str], Body]
ChoiceReader = Callable[[Mapping[str, Any]], tuple[str, str, bool]]
EventReader = Callable[[Mapping[str, Any], "str | None"], Chunk]


@dataclass(frozen=True)
class ApiFormat:
    """One OpenAI-compatible API: its path, how to build its body, how to read what it streams.

    Chat and completions stream chunks with ``choices`` (``read_choice`` reads one choice; the rest is
    shared); an API of typed events (the Responses API) reads each whole event (``read_event``, given
    the SSE event name). ``end_markers`` are bytes that may end the stream (the reader decodes a read
    holding one at once), ``end_name`` names the end in messages."""

    path: str
    build_body: BodyBuilder
    read_choice: ChoiceReader  # choice -> (content text, reasoning text, text is tool-call arguments)
    read_event: EventReader | None = None
    end_markers: tuple[bytes, ...] = (b"[DONE]", b'"error"')
    end_name: str = "[DONE]"


TOOL_NAME = "lookup"
TOOL_DESCRIPTION = "Look up a fact in the knowledge base."
TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string", "description": "what to look up"}},
    "required": ["query"],
}


def exact_length(settings: TargetSettings, spec: RequestSpec) -> bool:
    """Whether the request asks for exactly ``max_tokens`` tokens: ``ignore_eos``/``min_tokens`` are
    sent, and the answer is free text (a tool call or a JSON schema ends where its grammar does)."""
    structured = spec.tool_calls or any(key == "response_format" for key, _ in spec.extra_body)
    return (settings.ignore_eos or settings.send_min_tokens) and not structured


def _common_body(settings: TargetSettings, spec: RequestSpec, model: str) -> Body:
    body: Body = {"model": model, "max_tokens": spec.max_tokens, "stream": True}
    options: dict[str, bool] = {"include_usage": True}
    if settings.request_continuous_usage:
        options["continuous_usage_stats"] = True
    body["stream_options"] = options
    if exact_length(settings, spec):
        if settings.ignore_eos:
            body["ignore_eos"] = True
        if settings.send_min_tokens:
            body["min_tokens"] = spec.max_tokens
    if settings.request_token_ids:
        body["return_token_ids"] = True
    return body


def _merge_extra(body: Body, settings: TargetSettings, spec: RequestSpec) -> Body:
    # Extra fields win (the request's over the target's): a user who sets them knows the server better.
    body.update(settings.extra_body)
    body.update(spec.extra_body)
    return body


def completions_body(settings: TargetSettings, spec: RequestSpec, model: str) -> Body:
    """The ``/v1/completions`` body for ``spec``."""
    body = _common_body(settings, spec, model)
    body["prompt"] = spec.prompt
    return _merge_extra(body, settings, spec)


def _messages(spec: RequestSpec) -> list[dict[str, str]]:
    pairs = spec.messages if spec.messages is not None else (("user", spec.prompt),)
    return [{"role": role, "content": content} for role, content in pairs]


def chat_body(settings: TargetSettings, spec: RequestSpec, model: str) -> Body:
    """The ``/v1/chat/completions`` body for ``spec`` (its messages, else the prompt as one user turn)."""
    body = _common_body(settings, spec, model)
    body["messages"] = _messages(spec)
    if spec.tool_calls:
        function = {"name": TOOL_NAME, "description": TOOL_DESCRIPTION, "parameters": TOOL_PARAMETERS}
        body["tools"] = [{"type": "function", "function": function}]
        body["tool_choice"] = {"type": "function", "function": {"name": TOOL_NAME}}
    return _merge_extra(body, settings, spec)


def responses_body(settings: TargetSettings, spec: RequestSpec, model: str) -> Body:
    """The ``/v1/responses`` body: ``input`` messages and ``max_output_tokens`` (the Responses API has
    no ``stream_options``, ``min_tokens`` or token ids; ``ignore_eos`` is an extension vLLM accepts)."""
    body: Body = {"model": model, "input": _messages(spec), "max_output_tokens": spec.max_tokens}
    body["stream"] = True
    if settings.ignore_eos and exact_length(settings, spec):
        body["ignore_eos"] = True
    if spec.tool_calls:
        tool = {"type": "function", "name": TOOL_NAME, "description": TOOL_DESCRIPTION}
        body["tools"] = [tool | {"parameters": TOOL_PARAMETERS}]
        body["tool_choice"] = {"type": "function", "name": TOOL_NAME}
    return _merge_extra(body, settings, spec)


def _text(value: object) -> str:
    return value if value.__class__ is str else ""


def completions_choice(choice: Mapping[str, Any]) -> tuple[str, str, bool]:
    """A completions choice: its ``text`` (completions have no reasoning field)."""
    return _text(choice.get("text")), "", False


def _tool_arguments(delta: Mapping[str, Any]) -> str:
    calls = delta.get("tool_calls")
    if calls.__class__ is not list:
        return ""
    parts = []
    for call in calls:
        function = call.get("function") if call.__class__ is dict else None
        if function.__class__ is dict:
            parts.append(_text(function.get("arguments")))
    return "".join(parts)


def chat_choice(choice: Mapping[str, Any]) -> tuple[str, str, bool]:
    """A chat choice: ``delta.content``, ``delta.reasoning_content`` or ``delta.reasoning``, and the
    arguments text of ``delta.tool_calls`` (a tool call's tokens)."""
    delta = choice.get("delta")
    if delta.__class__ is not dict:
        return "", "", False
    reasoning = _text(delta.get("reasoning_content")) or _text(delta.get("reasoning"))
    content = _text(delta.get("content"))
    if not content and "tool_calls" in delta:
        arguments = _tool_arguments(delta)
        return arguments, reasoning, bool(arguments)
    return content, reasoning, False


_REASONING_EVENTS = frozenset(
    ("response.reasoning_text.delta", "response.reasoning_summary_text.delta", "response.reasoning.delta")
)


def _responses_usage(response: object, chunk: Chunk) -> Chunk:
    usage = response.get("usage") if isinstance(response, dict) else None
    if usage.__class__ is dict:
        chunk.completion_tokens = _count(usage.get("output_tokens"))
        chunk.prompt_tokens = _count(usage.get("input_tokens"))
        details = usage.get("input_tokens_details")
        if details.__class__ is dict:
            chunk.cached_tokens = _count(details.get("cached_tokens"))
    return chunk


def _responses_end(kind: str, response: object) -> Chunk:
    # vLLM ends an answer cut at max_output_tokens with response.completed whose status is incomplete.
    status = response.get("status") if isinstance(response, dict) else None
    if kind == "response.completed" and status != "incomplete":
        return _responses_usage(response, Chunk(finish_reason="stop", end=True))
    details = response.get("incomplete_details") if isinstance(response, dict) else None
    reason = details.get("reason") if details.__class__ is dict else None
    reason = reason if reason.__class__ is str else "unknown"
    if reason == "max_output_tokens":
        return _responses_usage(response, Chunk(finish_reason="length", end=True))
    return _responses_usage(response, Chunk(finish_reason=reason, end=True, incomplete=reason))


def responses_event(obj: Mapping[str, Any], event: str | None) -> Chunk:
    """One Responses API event (its ``type``, else the SSE event name): see the module docstring."""
    kind = obj.get("type")
    kind = kind if kind.__class__ is str else (event or "")
    if kind == "response.output_text.delta":
        return Chunk(_text(obj.get("delta")))
    if kind == "response.function_call_arguments.delta":
        return Chunk(_text(obj.get("delta")), tool=True)
    if kind in _REASONING_EVENTS:
        return Chunk(reasoning=_text(obj.get("delta")))
    if kind in ("response.completed", "response.incomplete"):
        return _responses_end(kind, obj.get("response"))
    if kind == "response.failed":
        response = obj.get("response")
        error = response.get("error") if response.__class__ is dict else None
        return Chunk(error=_error_message({"error": error}) if error else "response.failed")
    if kind == "error":
        return Chunk(error=str(obj.get("message") or obj.get("code") or "error event")[:200])
    return Chunk()


FORMATS: dict[Api, ApiFormat] = {
    "completions": ApiFormat("/v1/completions", completions_body, completions_choice),
    "chat": ApiFormat("/v1/chat/completions", chat_body, chat_choice),
    "responses": ApiFormat(
        "/v1/responses",
        responses_body,
        completions_choice,  # unused: events are read whole
        read_event=responses_event,
        end_markers=(b"response.completed", b"response.incomplete", b"response.failed", b'"error"'),
        end_name="response.completed",
    ),
}


def _count(value: object) -> int | None:
    return value if value.__class__ is int else None


def _error_message(obj: Mapping[str, Any]) -> str | None:
    error = obj.get("error")
    if error is None:
        return None
    message = error.get("message") if isinstance(error, Mapping) else error
    return str(message)[:200] or "error"


def read_chunk(fmt: ApiFormat, obj: object, event: str | None = None) -> Chunk:
    """Read one decoded JSON chunk, sent as SSE event ``event`` (raises ``ValueError`` when it is not
    a chunk at all).

    Type checks compare classes exactly (``json.loads`` makes only dict, list, str, int, float, bool and
    None): several times cheaper than ``isinstance`` against ABCs, on the path every chunk takes."""
    if obj.__class__ is not dict:
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    if fmt.read_event is not None:
        return fmt.read_event(obj, event)
    usage = obj.get("usage")
    completion = prompt = cached = None
    if usage.__class__ is dict:
        completion, prompt = _count(usage.get("completion_tokens")), _count(usage.get("prompt_tokens"))
        details = usage.get("prompt_tokens_details")
        cached = _count(details.get("cached_tokens")) if details.__class__ is dict else None
    elif (timings := obj.get("timings")).__class__ is dict:
        # llama.cpp with ``timings_per_token``: the tokens predicted so far, on every chunk.
        completion = _count(timings.get("predicted_n"))
    if cached is None and (timings := obj.get("timings")).__class__ is dict:
        cached = _count(timings.get("cache_n"))  # llama.cpp: prompt tokens reused from its cache
    choices = obj.get("choices")
    choice = choices[0] if choices.__class__ is list and choices else None
    if choice.__class__ is not dict:
        error = _error_message(obj) if "error" in obj else None
        return Chunk(completion_tokens=completion, prompt_tokens=prompt, error=error, cached_tokens=cached)
    text, reasoning, tool = fmt.read_choice(choice)
    ids = choice.get("token_ids")
    reason = choice.get("finish_reason")
    return Chunk(
        text,
        reasoning,
        len(ids) if ids.__class__ is list else None,
        completion,
        prompt,
        reason if reason.__class__ is str else None,
        tool=tool,
        cached_tokens=cached,
    )
