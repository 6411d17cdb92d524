"""OpenAI wire format, the request half: parsing request bodies (and the simulator's ``sim``
extension: scripts and faults) into ``ParsedRequest``s, and the error bodies a bad one gets.

Pure functions and small value classes; no I/O. What the simulator writes back is ``replies.py``.
"""

from __future__ import annotations

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
    "error_event",
    "no_end",
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
    responses: bool = False  # /v1/responses (typed events) rather than chat or completions
    tool: str | None = None  # stream a call of this function rather than text (tools + tool_choice)


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


def _tool(body: Mapping[str, Any], responses: bool) -> str | None:
    """The function to call: ``tool_choice`` names it (or is ``required``/``auto``: the first tool);
    None without tools or with ``tool_choice: none``."""
    tools = body.get("tools")
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, Mapping) for t in tools):
        raise _bad("tools", "expected a list of tool objects")
    names = [str((t if responses else t.get("function") or {}).get("name") or "") for t in tools]
    if not all(names):
        raise _bad("tools", "every tool needs a function name")
    choice = body.get("tool_choice", "auto")
    if choice == "none":
        return None
    if isinstance(choice, Mapping):
        named = choice.get("name") if responses else (choice.get("function") or {}).get("name")
        if named not in names:
            raise _bad("tool_choice", f"names no tool of the request; valid: {', '.join(names)}")
        return str(named)
    if choice not in ("auto", "required"):
        raise _bad("tool_choice", 'expected "none", "auto", "required" or a named function')
    return names[0]


def _input_ids(body: Mapping[str, Any]) -> tuple[int, ...]:
    """The Responses API's ``input`` (a string, or messages whose content is a string or parts) and its
    ``instructions`` (a system message), through the chat template."""
    raw = body.get("input")
    messages: list[Mapping[str, Any]]
    if isinstance(raw, str) and raw:
        messages = [{"role": "user", "content": raw}]
    elif isinstance(raw, list) and raw and all(isinstance(m, Mapping) for m in raw):
        messages = [{"role": str(m.get("role", "user")), "content": m.get("content")} for m in raw]
    else:
        raise _bad("input", "expected a non-empty string or a non-empty list of messages")
    instructions = body.get("instructions")
    if isinstance(instructions, str) and instructions:
        messages.insert(0, {"role": "system", "content": instructions})
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


def _prompt(body: Mapping[str, Any], chat: bool, responses: bool) -> tuple[int, ...]:
    if responses:
        return _input_ids(body)
    return _messages_ids(body) if chat else _prompt_ids(body)


def parse_request(
    body: object, chat: bool, fault_modes: Sequence[str], *, responses: bool = False
) -> ParsedRequest:
    """Validate a request body (``responses``: of ``/v1/responses``); raises ``RequestError`` (400)
    naming the offending field."""
    if not isinstance(body, Mapping):
        raise RequestError(400, "request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "expected a non-empty string")
    stream = _bool(body, "stream")
    include_usage, continuous = (True, False) if responses else _stream_options(body, stream)
    max_tokens = _int(body, "max_completion_tokens", 1) if chat else None
    if responses:
        max_tokens = _int(body, "max_output_tokens", 1)
    max_tokens = max_tokens if max_tokens is not None else _int(body, "max_tokens", 1)
    min_tokens = _int(body, "min_tokens", 0) or 0
    if max_tokens is not None and min_tokens > max_tokens:
        raise _bad("min_tokens", f"must be <= max_tokens ({max_tokens}), got {min_tokens}")
    script, fault = _sim_extension(body, fault_modes)
    return ParsedRequest(
        chat=chat,
        model=model,
        prompt_ids=_prompt(body, chat, responses),
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
        responses=responses,
        tool=_tool(body, responses) if chat or responses else None,
    )
