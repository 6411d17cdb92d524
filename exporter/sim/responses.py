"""The Responses API (``POST /v1/responses``) on the simulator: its typed event stream and its body.

A streaming response is a sequence of SSE events, each with an ``event:`` line naming its type and a
JSON ``data:`` line that repeats it in ``"type"`` and numbers it (``sequence_number``):

``response.created``, ``response.output_item.added`` (a ``message``, or a ``function_call`` when the
request asked for a tool call), ``response.content_part.added`` (messages only), then one
``response.output_text.delta`` (or ``response.function_call_arguments.delta``) per chunk of tokens, and
at the end ``response.completed``, or ``response.incomplete`` with ``incomplete_details.reason:
max_output_tokens`` when the answer stopped at ``max_output_tokens`` (as OpenAI reports it), carrying
the usage (``input_tokens``, ``input_tokens_details.cached_tokens``, ``output_tokens``). There is no
``[DONE]``. The final response object lists no output items: probes time the deltas, and the text is
in them. An in-stream failure is an ``error`` event. Pure, like ``protocol.py``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from exporter.sim import tokenizer
from exporter.sim.protocol import ParsedRequest
from exporter.sim.replies import ChunkBuilder, http_chunk


def _dumps(obj: object) -> str:
    return json.dumps(obj, separators=(",", ":"))


def responses_usage(prompt_tokens: int, output_tokens: int, cached_tokens: int) -> dict[str, Any]:
    """The Responses API's usage object."""
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {"cached_tokens": cached_tokens},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt_tokens + output_tokens,
    }


def _status(finish_reason: str | None) -> tuple[str, dict[str, str] | None]:
    if finish_reason == "length":
        return "incomplete", {"reason": "max_output_tokens"}
    return "completed", None


class ResponsesBuilder(ChunkBuilder):
    """The event stream of one ``/v1/responses`` request (same interface as ``ChunkBuilder``)."""

    def __init__(self, req: ParsedRequest, request_id: str, created: int, http_chunked: bool) -> None:
        super().__init__(req, request_id, created, http_chunked)
        self.created = created
        self.sequence = 0
        self._item = f"fc_{request_id}" if req.tool is not None else f"msg_{request_id}"
        if req.tool is not None:
            self._kind = "response.function_call_arguments.delta"
            self._delta_head = f'{{"type":"{self._kind}","item_id":"{self._item}","output_index":0,'
        else:
            self._kind = "response.output_text.delta"
            self._delta_head = (
                f'{{"type":"{self._kind}","item_id":"{self._item}","output_index":0,"content_index":0,'
            )

    def _event(self, kind: str, fields: dict[str, Any]) -> str:
        data = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {_dumps(data)}"

    def _response(self, status: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        response = {
            "id": self.request_id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.req.model,
            "output": [],
        }
        return response | (extra or {})

    def _item_added(self) -> dict[str, Any]:
        if self.req.tool is not None:
            call_id = f"call_{self.request_id}"
            item = {"id": self._item, "type": "function_call", "call_id": call_id, "name": self.req.tool}
            return item | {"arguments": "", "status": "in_progress"}
        return {
            "id": self._item,
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }

    def open_events(self) -> list[str]:
        events = [
            self._event("response.created", {"response": self._response("in_progress")}),
            self._event("response.output_item.added", {"output_index": 0, "item": self._item_added()}),
        ]
        if self.req.tool is None:
            part = {"type": "output_text", "text": "", "annotations": []}
            fields = {"item_id": self._item, "output_index": 0, "content_index": 0, "part": part}
            events.append(self._event("response.content_part.added", fields))
        return events

    def close_events(self, completion_tokens: int, finish_reason: str | None = None) -> list[str]:
        status, details = _status(finish_reason)
        usage = responses_usage(self.prompt_tokens, completion_tokens, self.cached_tokens)
        response = self._response(status, {"incomplete_details": details, "usage": usage})
        return [self._event(f"response.{status}", {"response": response})]

    def _delta(self, text: str) -> str:
        number = self.sequence
        self.sequence += 1
        return f'event: {self._kind}\ndata: {self._delta_head}"sequence_number":{number},"delta":"{text}"}}'

    def content(
        self,
        ids: Sequence[int],
        first: bool,
        sent_after: int,
        finish_reason: str | None,
        text: str | None = None,
    ) -> str:
        return self._delta(self._content_text(ids, first, finish_reason, text))

    @property
    def plain(self) -> bool:
        return True

    def plain_frame(self, text: str) -> bytes:
        payload = (self._delta(text) + "\n\n").encode("ascii")
        return http_chunk(payload) if self.http_chunked else payload

    def usage_chunk(self, completion_tokens: int) -> str:
        return self.close_events(completion_tokens)[0]

    def error_event(self, message: str) -> str:
        return self._event("error", {"code": "server_error", "message": message, "param": None})

    def frame(self, events: Sequence[str]) -> bytes:
        payload = "".join(f"{event}\n\n" for event in events).encode("utf-8")
        return http_chunk(payload) if self.http_chunked else payload


def full_responses_body(
    req: ParsedRequest,
    request_id: str,
    created: int,
    token_ids: Sequence[int],
    finish_reason: str,
    cached_tokens: int = 0,
) -> dict[str, Any]:
    """The non-streaming ``/v1/responses`` body."""
    text = tokenizer.decode(token_ids)
    output: list[dict[str, Any]]
    if req.tool is not None:
        arguments = _dumps({"query": text})
        call = {"id": f"fc_{request_id}", "call_id": f"call_{request_id}", "name": req.tool}
        output = [{"type": "function_call", **call, "arguments": arguments, "status": "completed"}]
    else:
        part = {"type": "output_text", "text": text, "annotations": []}
        output = [{"type": "message", "id": f"msg_{request_id}", "role": "assistant", "content": [part]}]
    status, details = _status(finish_reason)
    return {
        "id": request_id,
        "object": "response",
        "created_at": created,
        "status": status,
        "incomplete_details": details,
        "model": req.model,
        "output": output,
        "usage": responses_usage(len(req.prompt_ids), len(token_ids), cached_tokens),
    }
