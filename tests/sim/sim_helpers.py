"""Helpers shared by the simulator's integration tests: an SSE reader that stamps each event."""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp


@dataclass
class Stream:
    """What a streaming request returned: status, headers, and (arrival time, event) pairs."""

    status: int
    content_type: str
    start: float
    events: list[tuple[float, Any]] = field(default_factory=list)

    @property
    def chunks(self) -> list[dict[str, Any]]:
        """The JSON events, without ``[DONE]``."""
        return [e for _, e in self.events if isinstance(e, dict)]

    def content_times(self, chat: bool) -> list[tuple[float, int]]:
        """(seconds since the request, tokens) of every content-bearing chunk."""
        out = []
        for at, event in self.events:
            if isinstance(event, dict) and event["choices"]:
                choice = event["choices"][0]
                text = choice["delta"].get("content", "") if chat else choice["text"]
                if text:
                    out.append((at - self.start, len(text) // 4))
        return out


async def stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Stream:
    """POST ``body`` and read the SSE response line by line, stamping each ``data:`` event."""
    start = time.monotonic()
    async with session.post(url, json=body) as resp:
        result = Stream(resp.status, resp.headers.get("Content-Type", ""), start)
        async for raw in resp.content:
            line = raw.decode("utf-8").rstrip("\n")
            if not line.startswith("data: "):
                continue
            data = line[len("data: ") :]
            result.events.append((time.monotonic(), data if data == "[DONE]" else json.loads(data)))
    return result


def completion_body(model: str = "sim-tiny", **fields: Any) -> dict[str, Any]:
    """A streaming completions request body."""
    return {"model": model, "prompt": "hello world", "max_tokens": 8, "stream": True, **fields}


def gaps(times: list[float]) -> list[float]:
    """Differences between consecutive times."""
    return [b - a for a, b in itertools.pairwise(times)]
