"""OpenAI wire format, the reply half: usage objects, whole responses and the SSE chunks of a stream.

Pure functions and small value classes; no I/O. Streaming chunks are built from per-request string
templates rather than ``json.dumps`` per chunk (the hot path): generated text is always lowercase letters
and spaces (see ``tokenizer``), so it never needs escaping, and the model name is escaped once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from exporter.sim import tokenizer
from exporter.sim.protocol import ParsedRequest, error_body


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's usage object, with the prompt tokens served from the prefix cache."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
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


def _usage_json(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> str:
    total = prompt_tokens + completion_tokens
    return (
        f'{{"prompt_tokens":{prompt_tokens},"total_tokens":{total},"completion_tokens":{completion_tokens},'
        f'"prompt_tokens_details":{{"cached_tokens":{cached_tokens}}}}}'
    )


class ChunkBuilder:
    """Builds the SSE bytes of one streaming response, chunk by chunk, from prebuilt templates.

    A chat request with a tool (``ParsedRequest.tool``) streams a tool call: its opening delta names
    the function, and every token is a ``delta.tool_calls[0].function.arguments`` piece; the arguments
    open with ``{"query":"`` and close with ``"}`` so that together they are JSON."""

    def __init__(self, req: ParsedRequest, request_id: str, created: int, http_chunked: bool) -> None:
        self.req = req
        self.prompt_tokens = len(req.prompt_ids)
        self.cached_tokens = 0  # prompt tokens served from the prefix cache (set once admitted)
        self.http_chunked = http_chunked
        self.request_id = request_id
        kind = "chat.completion.chunk" if req.chat else "text_completion"
        self._head = (
            f'{{"id":"{request_id}","object":"{kind}","created":{created},"model":{json.dumps(req.model)}'
        )
        if req.tool is not None:
            delta = '"delta":{"tool_calls":[{"index":0,"function":{"arguments":"'
            self._open = self._head + ',"choices":[{"index":0,' + delta
            self._close = '"}}]},"logprobs":null,"finish_reason":'
        elif req.chat:
            self._open = self._head + ',"choices":[{"index":0,"delta":{"content":"'
            self._close = '"},"logprobs":null,"finish_reason":'
        else:
            self._open = self._head + ',"choices":[{"index":0,"text":"'
            self._close = '","logprobs":null,"finish_reason":'
        # Generated text and the escaped model name are ASCII, so the fast path can encode as ASCII.
        self._data_open = "data: " + self._open
        self._plain_close = self._close + ("null}]}" if req.chat else 'null,"stop_reason":null}]}') + "\n\n"

    def _usage(self, completion_tokens: int) -> str:
        return _usage_json(self.prompt_tokens, completion_tokens, self.cached_tokens)

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
            parts.append(f',"usage":{self._usage(sent)}')
        parts.append("}")
        return "".join(parts)

    def role(self) -> str:
        """The role-only delta that opens a chat stream, as vLLM sends it."""
        tail = "" if not self.req.continuous_usage else f',"usage":{self._usage(0)}'
        delta = '"delta":{"role":"assistant","content":""}'
        return self._head + f',"choices":[{{"index":0,{delta},"logprobs":null,"finish_reason":null}}]{tail}}}'

    def _tool_opening(self) -> str:
        call = {
            "index": 0,
            "id": f"call_{self.request_id}",
            "type": "function",
            "function": {"name": self.req.tool, "arguments": ""},
        }
        delta = json.dumps({"tool_calls": [call]}, separators=(",", ":"))
        return (
            self._head + f',"choices":[{{"index":0,"delta":{delta},"logprobs":null,"finish_reason":null}}]}}'
        )

    def open_events(self) -> list[str]:
        """Events before the first content chunk: a chat stream's role delta (and a tool call's name)."""
        if not self.req.chat:
            return []
        return [self.role(), self._tool_opening()] if self.req.tool is not None else [self.role()]

    def close_events(self, completion_tokens: int, finish_reason: str | None = None) -> list[str]:
        """Events after the last content chunk: the usage chunk when asked for, and ``[DONE]``."""
        usage_events = [self.usage_chunk(completion_tokens)] if self.req.include_usage else []
        return [*usage_events, DONE]

    def _tool_text(self, text: str, first: bool, last: bool) -> str:
        # The arguments' JSON, escaped as a JSON string's content: generated text needs no escaping.
        return ('{\\"query\\":\\"' if first else "") + text + ('\\"}' if last else "")

    def content(
        self,
        ids: Sequence[int],
        first: bool,
        sent_after: int,
        finish_reason: str | None,
        text: str | None = None,
    ) -> str:
        """One content chunk of ``ids`` (``text`` if known); ``sent_after`` counts tokens sent with it."""
        text = self._content_text(ids, first, finish_reason, text)
        return self._open + text + self._close + self._tail(finish_reason, ids, first, sent_after)

    def _content_text(
        self, ids: Sequence[int], first: bool, finish_reason: str | None, text: str | None
    ) -> str:
        """The text a content chunk carries: the tokens' text, or a tool call's arguments made of it."""
        if text is None:
            text = "".join(tokenizer.token_text(t) for t in ids)
        if self.req.tool is not None:
            text = self._tool_text(text, first, finish_reason is not None)
        return text

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
        return self._head + f',"choices":[],"usage":{self._usage(completion_tokens)}}}'

    def error_event(self, message: str) -> str:
        """An in-stream error, as vLLM sends one when generation fails mid-stream."""
        return json.dumps(error_body(message, "server_error", None, "500"), separators=(",", ":"))

    def frame(self, events: Sequence[str]) -> bytes:
        """SSE ``data:`` events as bytes, wrapped as one HTTP/1.1 chunk when the response is chunked."""
        payload = "".join(f"data: {event}\n\n" for event in events).encode("utf-8")
        return http_chunk(payload) if self.http_chunked else payload


def http_chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunked-transfer frame."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


DONE = "[DONE]"
