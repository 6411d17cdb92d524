"""The OpenAI wire formats the probe speaks: ``/v1/completions`` and ``/v1/chat/completions``.

Each API is one ``ApiFormat`` with the same two functions (build the body, read a parsed chunk), and all
of them sit in one map, ``FORMATS``, keyed by ``Api``; the I/O around them is shared (``client.py``), so
adding an API is adding an entry here. Everything in this module is pure.

What counts as a token: only a *content-bearing* chunk, one whose text (``choices[0].text`` for
completions, ``choices[0].delta.content`` for chat) is non-empty. A chat stream's opening role-only delta,
empty-content chunks, usage-only chunks (``"choices": []``) and ``[DONE]`` are never tokens: counting them
shifts TTFT earlier and adds near-zero inter-token gaps (inference-perf #392). Reasoning text
(``delta.reasoning_content`` in vLLM and DeepSeek, ``delta.reasoning`` in newer vLLM and OpenRouter) is
recorded apart, so TTFT can be reported with or without it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from exporter.probe.target import Api, RequestSpec, TargetSettings


@dataclass(slots=True)
class Chunk:
    """What one streamed JSON chunk says, independent of the API that sent it (not frozen: hot path)."""

    text: str = ""  # content text ("" when none)
    reasoning: str = ""  # reasoning text ("" when none)
    token_ids: int | None = None  # how many token ids the chunk listed, None when it listed none
    # Cumulative output tokens: usage.completion_tokens when the chunk has usage, else llama.cpp's
    # timings.predicted_n (sent on every chunk when the request asks for ``timings_per_token``).
    completion_tokens: int | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None  # an in-stream error object's message

    @property
    def content(self) -> bool:
        """Whether the chunk carries content tokens."""
        return bool(self.text)


Body = dict[str, Any]
BodyBuilder = Callable[[TargetSettings, RequestSpec, str], Body]
ChoiceReader = Callable[[Mapping[str, Any]], tuple[str, str]]


@dataclass(frozen=True)
class ApiFormat:
    """One OpenAI-compatible API: its path, how to build its body, how to read a choice's text."""

    path: str
    build_body: BodyBuilder
    read_choice: ChoiceReader  # choice -> (content text, reasoning text)


def _common_body(settings: TargetSettings, spec: RequestSpec, model: str) -> Body:
    body: Body = {"model": model, "max_tokens": spec.max_tokens, "stream": True}
    options: dict[str, bool] = {"include_usage": True}
    if settings.request_continuous_usage:
        options["continuous_usage_stats"] = True
    body["stream_options"] = options
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


def chat_body(settings: TargetSettings, spec: RequestSpec, model: str) -> Body:
    """The ``/v1/chat/completions`` body for ``spec`` (its messages, else the prompt as one user turn)."""
    body = _common_body(settings, spec, model)
    pairs = spec.messages if spec.messages is not None else (("user", spec.prompt),)
    body["messages"] = [{"role": role, "content": content} for role, content in pairs]
    return _merge_extra(body, settings, spec)


def _text(value: object) -> str:
    return value if value.__class__ is str else ""


def completions_choice(choice: Mapping[str, Any]) -> tuple[str, str]:
    """A completions choice: its ``text`` (completions have no reasoning field)."""
    return _text(choice.get("text")), ""


def chat_choice(choice: Mapping[str, Any]) -> tuple[str, str]:
    """A chat choice: ``delta.content`` and ``delta.reasoning_content`` or ``delta.reasoning``."""
    delta = choice.get("delta")
    if delta.__class__ is not dict:
        return "", ""
    reasoning = _text(delta.get("reasoning_content")) or _text(delta.get("reasoning"))
    return _text(delta.get("content")), reasoning


FORMATS: dict[Api, ApiFormat] = {
    "completions": ApiFormat("/v1/completions", completions_body, completions_choice),
    "chat": ApiFormat("/v1/chat/completions", chat_body, chat_choice),
}


def _count(value: object) -> int | None:
    return value if value.__class__ is int else None


def _error_message(obj: Mapping[str, Any]) -> str | None:
    error = obj.get("error")
    if error is None:
        return None
    message = error.get("message") if isinstance(error, Mapping) else error
    return str(message)[:200] or "error"


def read_chunk(fmt: ApiFormat, obj: object) -> Chunk:
    """Read one decoded JSON chunk (raises ``ValueError`` when it is not a chunk at all).

    Type checks compare classes exactly (``json.loads`` makes only dict, list, str, int, float, bool and
    None): several times cheaper than ``isinstance`` against ABCs, on the path every chunk takes."""
    if obj.__class__ is not dict:
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    usage = obj.get("usage")
    completion = prompt = None
    if usage.__class__ is dict:
        completion, prompt = _count(usage.get("completion_tokens")), _count(usage.get("prompt_tokens"))
    elif (timings := obj.get("timings")).__class__ is dict:
        # llama.cpp with ``timings_per_token``: the tokens predicted so far, on every chunk.
        completion = _count(timings.get("predicted_n"))
    choices = obj.get("choices")
    choice = choices[0] if choices.__class__ is list and choices else None
    if choice.__class__ is not dict:
        error = _error_message(obj) if "error" in obj else None
        return Chunk(completion_tokens=completion, prompt_tokens=prompt, error=error)
    text, reasoning = fmt.read_choice(choice)
    ids = choice.get("token_ids")
    reason = choice.get("finish_reason")
    return Chunk(
        text,
        reasoning,
        len(ids) if ids.__class__ is list else None,
        completion,
        prompt,
        reason if reason.__class__ is str else None,
    )
