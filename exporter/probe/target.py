"""How to reach a target and what to ask it: settings (picklable, so worker processes get them too).

``Secret`` holds an API key read from an environment variable or a file; it never prints its value.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Api = Literal["chat", "completions", "responses"]
APIS: tuple[Api, ...] = ("chat", "completions", "responses")


class Secret:
    """A secret value that never appears in repr, str, logs or pickled reports by accident."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    @classmethod
    def from_env(cls, name: str) -> Secret:
        value = os.environ.get(name)
        if not value:
            raise ValueError(f"environment variable {name} is not set or empty (it should hold the API key)")
        return cls(value.strip())

    @classmethod
    def from_file(cls, path: str | Path) -> Secret:
        try:
            value = Path(path).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ValueError(f"cannot read the API key file {path}: {exc.strerror}") from exc
        if not value:
            raise ValueError(f"the API key file {path} is empty")
        return cls(value)

    def reveal(self) -> str:
        """The value, for the one place that sends it."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[Any, ...]:
        # Worker processes need the key; pickling is the only way it travels, never printing.
        return (Secret, (self._value,))


@dataclass(frozen=True)
class Timeouts:
    """Per-request limits in seconds (None: no limit)."""

    connect: float | None = 10.0
    ttft: float | None = 60.0  # from the request write to the first token
    idle: float | None = 30.0  # longest silence between bytes once streaming (aiohttp sock_read)
    total: float | None = 600.0


@dataclass(frozen=True)
class TargetSettings:
    """An OpenAI-compatible endpoint and how to talk to it."""

    base_url: str  # e.g. http://127.0.0.1:8000 (``/v1`` is added by the request functions)
    api: Api = "chat"
    model: str | None = None  # None: ask /v1/models for the first model
    api_key: Secret | None = None
    headers: tuple[tuple[str, str], ...] = ()
    extra_body: tuple[tuple[str, Any], ...] = ()  # merged into every request body
    timeouts: Timeouts = field(default_factory=Timeouts)
    verify_tls: bool = True
    ca_file: str | None = None
    ignore_eos: bool = True  # ask for exactly max_tokens where the server supports it
    send_min_tokens: bool = True  # also send min_tokens = max_tokens (vLLM honours it; llama.cpp ignores)
    request_token_ids: bool = True  # ask for return_token_ids (vLLM); harmless where unknown
    request_continuous_usage: bool = True  # stream_options.continuous_usage_stats
    tokenizer_file: str | None = None  # a tokenizer.json for counting chunk tokens locally
    max_line_bytes: int = 4 * 1024 * 1024  # longest SSE line accepted (vLLM's first chunk lists prompt ids)


@dataclass(frozen=True)
class FollowUp:
    """A later turn of a conversation: the user's next message, sent ``think_s`` seconds after the
    previous answer ended, and how many tokens to ask for."""

    content: str
    max_tokens: int
    content_tokens: int | None = None  # the new message's intended length in tokens, when known
    think_s: float = 0.0


@dataclass(frozen=True)
class RequestSpec:
    """One request to send: the prompt (text or chat messages) and how many tokens to ask for.

    A multi-turn session is its first turn's spec with ``followups``: the load runner sends the turns
    one after the other, each with the whole conversation so far (``exporter.load.sessions``)."""

    prompt: str
    max_tokens: int
    prompt_tokens: int | None = None  # the intended prompt length in tokens, when known
    messages: tuple[tuple[str, str], ...] | None = None  # (role, content) pairs for chat; else prompt
    request_id: str | None = None
    extra_body: tuple[tuple[str, Any], ...] = ()  # merged over TargetSettings.extra_body for this request
    tool_calls: bool = False  # ask for a tool call (a tool definition and tool_choice) instead of text
    session: str | None = None  # the conversation this request belongs to (None: its own request_id)
    turn: int = 1  # 1 for a conversation's first request
    followups: tuple[FollowUp, ...] = ()  # the conversation's later turns (first turns only)
    keep_text: bool = False  # keep the answer's text on the result (a later turn re-sends it)
