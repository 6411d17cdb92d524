"""A pure, incremental Server-Sent Events decoder: bytes in, events out, no I/O.

Follows the WHATWG event-stream rules that matter to OpenAI-style streams: lines end with CRLF, LF or a
lone CR (a CRLF split across two reads is one line ending); a line starting with ``:`` is a comment (keep-
alive pings) and is skipped; ``data:`` lines accumulate, joined with ``"\\n"``, and a blank line dispatches
them as one event; ``event:`` sets the event's type; ``id:`` and ``retry:`` are ignored. An event that is
not ended by a blank line before the stream closes is not dispatched (``pending`` tells whether bytes were
left over, which means the stream was cut).

UTF-8 is decoded one *complete line* at a time: line endings are ASCII bytes that never occur inside a
multi-byte UTF-8 sequence, so buffering the bytes of an unfinished line is an incremental decoder that
handles a code point split across reads, and it decodes each line once instead of once per read.
Invalid UTF-8 raises ``SseInvalidUtf8``; a line longer than the bound raises ``SseLineTooLong`` (a
server that never ends its line must not eat the client's memory).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DONE = "[DONE]"
DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024  # vLLM's first chunk may carry every prompt token id
_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class SseError(ValueError):
    """The byte stream is not a valid event stream."""


class SseLineTooLong(SseError):
    """A line exceeded the decoder's bound."""


class SseInvalidUtf8(SseError):
    """A line was not valid UTF-8."""


@dataclass(frozen=True, slots=True)
class SseEvent:
    """One dispatched event: its ``data`` (lines joined with ``"\\n"``) and its ``event`` type, if any."""

    data: str
    event: str | None = None

    @property
    def done(self) -> bool:
        """Whether this is OpenAI's end-of-stream sentinel ``data: [DONE]``."""
        return self.data == DONE


class SseDecoder:
    """Feed it the bytes of each read; it returns the events those bytes completed."""

    __slots__ = ("_buffer", "_data", "_event", "_max_line", "_skip_lf", "_started")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._max_line = max_line_bytes
        self._buffer = b""  # the bytes of an unfinished line
        self._data: list[str] = []  # data lines of the event being built
        self._event: str | None = None
        self._skip_lf = False  # the last read ended with CR: a leading LF in the next one belongs to it
        self._started = False

    @property
    def pending(self) -> bool:
        """Whether an unfinished line or an undispatched event is left (the stream was cut)."""
        return bool(self._buffer or self._data)

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Decode one read; returns the events it completed (raises ``SseError`` on bad input)."""
        chunk = self._trim_start(chunk)
        if not chunk:
            return []
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            lines = _LINE_END.split(buffer)
            self._skip_lf = buffer.endswith(b"\r")
        else:
            lines = buffer.split(b"\n")
        self._buffer = lines.pop()
        if len(self._buffer) > self._max_line:
            raise SseLineTooLong(f"SSE line longer than {self._max_line} bytes without an end")
        events: list[SseEvent] = []
        for line in lines:
            self._line(line, events)
        return events

    def _trim_start(self, chunk: bytes) -> bytes:
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not self._started and chunk:
            # A byte-order mark may open the stream; it is not part of the first field name.
            if len(chunk) < len(_BOM) and _BOM.startswith(chunk) and not self._buffer:
                self._buffer = chunk
                return b""
            self._started = True
            if self._buffer.startswith(_BOM[:1]) or chunk.startswith(_BOM):
                joined = self._buffer + chunk
                self._buffer = b""
                return joined.removeprefix(_BOM)
        return chunk

    def _line(self, raw: bytes, events: list[SseEvent]) -> None:
        if not raw:
            if self._data:
                events.append(SseEvent("\n".join(self._data), self._event))
                self._data = []
            self._event = None
            return
        if len(raw) > self._max_line:
            raise SseLineTooLong(f"SSE line of {len(raw)} bytes, longer than {self._max_line}")
        if raw.startswith(b"data:"):
            # The hot path: no need to split the field name.
            value = raw[6:] if raw[5:6] == b" " else raw[5:]
            self._data.append(_decode(value))
            return
        if raw[:1] == b":":
            return
        name, colon, value = raw.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":  # "data" with no colon: an empty data line
            self._data.append("")
        elif name == b"event":
            self._event = _decode(value)


def _decode(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SseInvalidUtf8(f"invalid UTF-8 in an SSE line at byte {exc.start}") from exc
