"""How to reach a target and what to ask it: settings (picklable, so worker processes get them too).

``Api``, ``Secret`` and ``Timeouts`` are defined (and read) in ``exporter.settings.target``; they are
exported here too, beside the settings built from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from exporter.settings.target import APIS, Api, Secret, Timeouts, secret_forms

# Every probe request carries it, so that an observer of real traffic (exporter.traffic) behind the same
# Envoy keeps the exporter's own requests out of the users' figures.
PROBE_HEADER = "X-Fluidity-Probe"


@dataclass(frozen=True)
class TargetSettings:
    """An OpenAI-compatible endpoint and how to talk to it."""

    base_url: str  # e.g. http://127.0.0.1:8000 (``/v1`` is added by the request functions)
    api: Api = "chat"
    model: str | None = None  # None: ask /v1/models for the first model
    api_key: Secret | None = None
    headers: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    secret_headers: tuple[str, ...] = ()  # names of the headers whose values are secret
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

    def secret_texts(self) -> tuple[str, ...]:
        """Every text to mask in what is shown of this target's answers, longest first: the API key
        and the values of the secret headers (a target or proxy may echo them back)."""
        texts = [self.api_key.reveal()] if self.api_key is not None else []
        secret = {name.lower() for name in self.secret_headers}
        texts += [
            form for name, value in self.headers if name.lower() in secret for form in secret_forms(value)
        ]
        return tuple(sorted(set(texts), key=len, reverse=True))


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


__all__ = ["APIS", "Api", "FollowUp", "RequestSpec", "Secret", "TargetSettings", "Timeouts"]
