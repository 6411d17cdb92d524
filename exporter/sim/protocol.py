"""OpenAI wire format: parsing request bodies and building responses, SSE chunks and errors.

Pure functions and small value classes; no I/O. Streaming chunks are built from per-request string
templates rather than ``json.dumps`` per chunk (the hot path): generated text is always lowercase letters
and spaces (see ``tokenizer``), so it never needs escaping, and the model name is escaped once.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from exporter.sim import tokenizer

FAULT_PARAMS = ("mode", "at", "duration", "size", "interval")
# What each mode does is in ``faults.py``; the names live here so that config parsing needs no aiohttp.
FAULT_MODES = (
    "http_500",
    "http_503",
    "http_429",
    "reset",
    "malformed_sse",
    "invalid_utf8",
    "hang_before_headers",
    "stall",
    "slow_drip",
    "wrong_content_type",
    "oversized_line",
)


class RequestError(Exception):
    """A client error, rendered as OpenAI's error JSON with an HTTP status."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        err_type: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.err_type = err_type

    def body(self) -> dict[str, Any]:
        """OpenAI's error shape."""
        return error_body(self.message, self.err_type, self.param, self.code)


def error_body(
    message: str, err_type: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def _bad(param: str, message: str) -> RequestError:
    return RequestError(400, f"{param}: {message}", param=param)


@dataclass(frozen=True)
class Script:
    """An exact timing script: first chunk ``ttft`` s after the request, then ``gaps`` between chunks."""

    ttft: float = 0.0
    gaps: tuple[float, ...] = (0.01,)
    chunk_sizes: tuple[int, ...] = (1,)
    stalls: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class FaultSpec:
    """A fault to inject: ``mode`` (see ``faults.FAULT_MODES``) at chunk ``at``, with its parameters."""

    mode: str
    at: int = 3
    duration: float = 3600.0
    size: int = 1 << 20
    interval: float = 0.005


@dataclass(frozen=True)
class ParsedRequest:
    """A validated completions or chat-completions request."""

    chat: bool
    model: str
    prompt_ids: tuple[int, ...]
    max_tokens: int | None
    min_tokens: int
    ignore_eos: bool
    temperature: float
    stream: bool
    include_usage: bool
    continuous_usage: bool
    return_token_ids: bool
    seed: int | None
    script: Script | None
    fault: FaultSpec | None


# -- field readers ---------------------------------------------------------------------------------


def _bool(body: Mapping[str, Any], name: str, default: bool = False) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _bad(name, f"expected a boolean, got {value!r}")
    return value


def _int(body: Mapping[str, Any], name: str, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _bad(name, f"expected an integer >= {minimum}, got {value!r}")
    return value


def _number(body: Mapping[str, Any], name: str, low: float, high: float, default: float) -> float:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise _bad(name, f"expected a number in [{low:g}, {high:g}], got {value!r}")
    return float(value)


def _prompt_ids(body: Mapping[str, Any]) -> tuple[int, ...]:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return tuple(tokenizer.encode(prompt))
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return tuple(tokenizer.encode(prompt[0]))
    is_ids = isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    if is_ids and prompt and all(0 <= t < tokenizer.VOCAB_SIZE for t in prompt):
        return tuple(prompt)
    raise _bad("prompt", "expected a non-empty string or a list of token ids (one prompt per request)")


def _messages_ids(body: Mapping[str, Any]) -> tuple[int, ...]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "expected a non-empty list of messages")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise _bad(f"messages[{index}]", 'expected an object with a string "role"')
        if "content" in message and not isinstance(message["content"], str | list | None):
            raise _bad(f"messages[{index}].content", "expected a string or a list of content parts")
    return tuple(tokenizer.encode(tokenizer.render_chat(messages)))


def _stream_options(body: Mapping[str, Any], stream: bool) -> tuple[bool, bool]:
    options = body.get("stream_options")
    if options is None:
        return False, False
    if not isinstance(options, Mapping):
        raise _bad("stream_options", "expected an object")
    if not stream:
        raise _bad("stream_options", "only allowed when stream is true")
    include = _bool(options, "include_usage")
    # As in vLLM: usage on every chunk only when the final usage chunk is also asked for.
    return include, include and _bool(options, "continuous_usage_stats")


# -- the sim extension -----------------------------------------------------------------------------


def _float_list(value: object, name: str) -> tuple[float, ...]:
    values: list[object] = value if isinstance(value, list) else [value]
    numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool) and v >= 0]
    if not values or len(numbers) != len(values):
        raise _bad(name, "expected a number >= 0 or a non-empty list of them")
    return tuple(float(v) for v in numbers)


def _script(raw: object) -> Script:
    if not isinstance(raw, Mapping):
        raise _bad("sim.script", "expected an object")
    unknown = set(raw) - {"ttft", "gap", "gaps", "chunk_sizes", "stalls"}
    if unknown:
        raise _bad(
            "sim.script", f'unknown key "{sorted(unknown)[0]}"; valid: ttft, gaps, chunk_sizes, stalls'
        )
    sizes = raw.get("chunk_sizes", [1])
    sizes = sizes if isinstance(sizes, list) else [sizes]
    if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in sizes):
        raise _bad("sim.script.chunk_sizes", "expected an integer >= 1 or a non-empty list of them")
    stalls = raw.get("stalls", {})
    if not isinstance(stalls, Mapping):
        raise _bad("sim.script.stalls", 'expected an object of token index -> seconds, e.g. {"40": 2.0}')
    try:
        parsed_stalls = {int(str(k)): _float_list(v, "sim.script.stalls")[0] for k, v in stalls.items()}
    except ValueError as exc:
        raise _bad("sim.script.stalls", "keys must be token indexes (integers)") from exc
    return Script(
        ttft=_float_list(raw.get("ttft", 0.0), "sim.script.ttft")[0],
        gaps=_float_list(raw.get("gaps", raw.get("gap", 0.01)), "sim.script.gaps"),
        chunk_sizes=tuple(sizes),
        stalls=parsed_stalls,
    )


def _fault(raw: object, modes: Sequence[str]) -> FaultSpec:
    spec = {"mode": raw} if isinstance(raw, str) else raw
    if not isinstance(spec, Mapping) or spec.get("mode") not in modes:
        raise _bad("sim.fault", f"unknown fault {raw!r}; valid: {', '.join(modes)}")
    unknown = set(spec) - set(FAULT_PARAMS)
    if unknown:
        raise _bad("sim.fault", f'unknown key "{sorted(unknown)[0]}"; valid: {", ".join(FAULT_PARAMS)}')
    at = _int(spec, "at", 0)
    size = _int(spec, "size", 1)
    return FaultSpec(
        mode=str(spec["mode"]),
        at=3 if at is None else at,
        duration=_number(spec, "duration", 0.0, 86400.0, 3600.0),
        size=(1 << 20) if size is None else size,
        interval=_number(spec, "interval", 0.0, 10.0, 0.005),
    )


def _sim_extension(body: Mapping[str, Any], modes: Sequence[str]) -> tuple[Script | None, FaultSpec | None]:
    sim = body.get("sim")
    if sim is None:
        return None, None
    if not isinstance(sim, Mapping) or set(sim) - {"script", "fault"}:
        raise _bad("sim", 'expected an object with "script" and/or "fault"')
    script = _script(sim["script"]) if "script" in sim else None
    fault = _fault(sim["fault"], modes) if "fault" in sim else None
    return script, fault


def parse_request(body: object, chat: bool, fault_modes: Sequence[str]) -> ParsedRequest:
    """Validate a request body; raises ``RequestError`` (400) naming the offending field."""
    if not isinstance(body, Mapping):
        raise RequestError(400, "request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "expected a non-empty string")
    stream = _bool(body, "stream")
    include_usage, continuous = _stream_options(body, stream)
    max_tokens = _int(body, "max_completion_tokens", 1) if chat else None
    max_tokens = max_tokens if max_tokens is not None else _int(body, "max_tokens", 1)
    min_tokens = _int(body, "min_tokens", 0) or 0
    if max_tokens is not None and min_tokens > max_tokens:
        raise _bad("min_tokens", f"must be <= max_tokens ({max_tokens}), got {min_tokens}")
    script, fault = _sim_extension(body, fault_modes)
    return ParsedRequest(
        chat=chat,
        model=model,
        prompt_ids=_messages_ids(body) if chat else _prompt_ids(body),
        max_tokens=max_tokens,
        min_tokens=min_tokens,
        ignore_eos=_bool(body, "ignore_eos"),
        temperature=_number(body, "temperature", 0.0, 2.0, 1.0),
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous,
        return_token_ids=_bool(body, "return_token_ids"),
        seed=_int(body, "seed", 0),
        script=script,
        fault=fault,
    )


# -- responses -------------------------------------------------------------------------------------


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """OpenAI's usage object."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
    }


def full_response(
    req: ParsedRequest, request_id: str, created: int, token_ids: Sequence[int], finish_reason: str
) -> dict[str, Any]:
    """The non-streaming response body."""
    text = tokenizer.decode(token_ids)
    choice: dict[str, Any] = {
        "index": 0,
        "logprobs": None,
        "finish_reason": finish_reason,
        "stop_reason": None,
    }
    if req.chat:
        choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
    else:
        choice["text"] = text
    if req.return_token_ids:
        choice["prompt_token_ids"] = list(req.prompt_ids)
        choice["token_ids"] = list(token_ids)
    return {
        "id": request_id,
        "object": "chat.completion" if req.chat else "text_completion",
        "created": created,
        "model": req.model,
        "choices": [choice],
        "usage": usage(len(req.prompt_ids), len(token_ids)),
    }


def _usage_json(prompt_tokens: int, completion_tokens: int) -> str:
    total = prompt_tokens + completion_tokens
    return (
        f'{{"prompt_tokens":{prompt_tokens},"total_tokens":{total},"completion_tokens":{completion_tokens}}}'
    )


class ChunkBuilder:
    """Builds the SSE bytes of one streaming response, chunk by chunk, from prebuilt templates."""

    def __init__(self, req: ParsedRequest, request_id: str, created: int, http_chunked: bool) -> None:
        self.req = req
        self.prompt_tokens = len(req.prompt_ids)
        self.http_chunked = http_chunked
        kind = "chat.completion.chunk" if req.chat else "text_completion"
        self._head = (
            f'{{"id":"{request_id}","object":"{kind}","created":{created},"model":{json.dumps(req.model)}'
        )
        self._open = (
            self._head + ',"choices":[{"index":0,"delta":{"content":"'
            if req.chat
            else self._head + ',"choices":[{"index":0,"text":"'
        )
        self._close = (
            '"},"logprobs":null,"finish_reason":' if req.chat else '","logprobs":null,"finish_reason":'
        )
        # Generated text and the escaped model name are ASCII, so the fast path can encode as ASCII.
        self._data_open = "data: " + self._open
        self._plain_close = self._close + ("null}]}" if req.chat else 'null,"stop_reason":null}]}') + "\n\n"

    def _tail(self, finish_reason: str | None, ids: Sequence[int], first: bool, sent: int) -> str:
        parts = ["null" if finish_reason is None else f'"{finish_reason}"']
        if not self.req.chat:
            parts.append(',"stop_reason":null')
        if self.req.return_token_ids:
            if first:
                parts.append(
                    f',"prompt_token_ids":{json.dumps(list(self.req.prompt_ids), separators=(",", ":"))}'
                )
            parts.append(f',"token_ids":{json.dumps(list(ids), separators=(",", ":"))}')
        parts.append("}]")
        if self.req.continuous_usage:
            parts.append(f',"usage":{_usage_json(self.prompt_tokens, sent)}')
        parts.append("}")
        return "".join(parts)

    def role(self) -> str:
        """The role-only delta that opens a chat stream, as vLLM sends it."""
        tail = "" if not self.req.continuous_usage else f',"usage":{_usage_json(self.prompt_tokens, 0)}'
        delta = '"delta":{"role":"assistant","content":""}'
        return self._head + f',"choices":[{{"index":0,{delta},"logprobs":null,"finish_reason":null}}]{tail}}}'

    def content(
        self,
        ids: Sequence[int],
        first: bool,
        sent_after: int,
        finish_reason: str | None,
        text: str | None = None,
    ) -> str:
        """One content chunk of ``ids`` (``text`` if known); ``sent_after`` counts tokens sent with it."""
        if text is None:
            text = "".join(tokenizer.token_text(t) for t in ids)
        return self._open + text + self._close + self._tail(finish_reason, ids, first, sent_after)

    @property
    def plain(self) -> bool:
        """Whether middle chunks carry nothing but text (no token ids, no usage): the fast path applies."""
        return not self.req.return_token_ids and not self.req.continuous_usage

    def plain_frame(self, text: str) -> bytes:
        """The bytes of a middle chunk of ``text`` when ``plain``: one concatenation and one encode."""
        payload = (self._data_open + text + self._plain_close).encode("ascii")
        return b"%x\r\n%s\r\n" % (len(payload), payload) if self.http_chunked else payload

    def usage_chunk(self, completion_tokens: int) -> str:
        """The final usage-only chunk (``stream_options.include_usage``)."""
        return self._head + f',"choices":[],"usage":{_usage_json(self.prompt_tokens, completion_tokens)}}}'

    def frame(self, events: Sequence[str]) -> bytes:
        """SSE ``data:`` events as bytes, wrapped as one HTTP/1.1 chunk when the response is chunked."""
        payload = "".join(f"data: {event}\n\n" for event in events).encode("utf-8")
        return http_chunk(payload) if self.http_chunked else payload


def http_chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunked-transfer frame."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


DONE = "[DONE]"
