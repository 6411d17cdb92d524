"""How to reach a target and what to ask it: settings (picklable, so worker processes get them too).

``TargetSettings`` (with ``Api``, ``Secret`` and ``Timeouts``) is plain data of ``exporter.settings.target``;
``Api``, ``Secret`` and ``Timeouts`` are exported here too, beside what a request asks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exporter.settings.target import APIS, Api, Secret, Timeouts

# Every probe request carries it, so that an observer of real traffic (exporter.traffic) behind the same
# Envoy keeps the exporter's own requests out of the users' figures.
PROBE_HEADER = "X-Fluidity-Probe"


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


__all__ = ["APIS", "Api", "FollowUp", "RequestSpec", "Secret", "Timeouts"]
