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
Invalid UTF-8 raises ``SseInvalidUtf8Error``; a line longer than the bound raises ``SseLineTooLongError``,
and an event whose data lines together pass the same bound (each charged ``LINE_COST_BYTES`` more for the
object it becomes) raises ``SseEventTooLargeError``: a server that never ends its line, or its event,
must not eat the client's memory. Both are ``SseTooLargeError``s.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from exporter.streams.limits import LINE_COST_BYTES

DONE = "[DONE]"
DEFAULT_MAX_LINE_BYTES = 4 * 1024 * 1024  # vLLM's first chunk may carry every prompt token id
_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


class SseError(ValueError):
    """The byte stream is not a valid event stream."""


class SseTooLargeError(SseError):
    """A line or an event exceeded the decoder's bound."""


class SseLineTooLongError(SseTooLargeError):
    """A line exceeded the decoder's bound."""


class SseEventTooLargeError(SseTooLargeError):
    """The data lines of one event exceeded the decoder's bound together."""


class SseInvalidUtf8Error(SseError):
    """A line was not valid UTF-8."""


@dataclass(slots=True)
class SseEvent:
    """One dispatched event: its ``data`` (lines joined with ``"\\n"``) and its ``event`` type, if any.
    (Not frozen: a frozen dataclass's ``__init__`` costs three times as much, and this is the hot path.)"""

    data: str
    event: str | None = None

    @property
    def done(self) -> bool:
        """Whether this is OpenAI's end-of-stream sentinel ``data: [DONE]``."""
        return self.data == DONE


class SseDecoder:
    """Feed it the bytes of each read; it returns the events those bytes completed."""

    __slots__ = ("_buffer", "_data", "_event", "_event_size", "_max_line", "_skip_lf", "_started")

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._max_line = max_line_bytes
        self._buffer = b""  # the bytes of an unfinished line
        self._data: list[str] = []  # data lines of the event being built
        self._event_size = 0  # what those lines hold in memory, about (LINE_COST_BYTES)
        self._event: str | None = None
        self._skip_lf = False  # the last read ended with CR: a leading LF in the next one belongs to it
        self._started = False

    @property
    def pending(self) -> bool:
        """Whether an unfinished line or an undispatched event is left (the stream was cut)."""
        return bool(self._buffer or self._data)

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """Decode one read; returns the events it completed (raises ``SseError`` on bad input)."""
        if self._skip_lf or not self._started:
            chunk = self._trim_start(chunk)
        if not chunk:
            return []
        payloads = self._lone_payloads(chunk)
        if payloads is not None:
            try:
                return [SseEvent(payload.decode("utf-8")) for payload in payloads]
            except UnicodeDecodeError as exc:
                raise SseInvalidUtf8Error(f"invalid UTF-8 in an SSE line at byte {exc.start}") from None
        buffer = self._buffer + chunk if self._buffer else chunk
        if b"\r" in buffer:
            lines = _LINE_END.split(buffer)
            self._skip_lf = buffer.endswith(b"\r")
        else:
            lines = buffer.split(b"\n")
        self._buffer = lines.pop()
        if len(self._buffer) > self._max_line:
            raise SseLineTooLongError(f"SSE line longer than {self._max_line} bytes without an end")
        events: list[SseEvent] = []
        try:
            self._lines(lines, events)
        except UnicodeDecodeError as exc:
            raise SseInvalidUtf8Error(f"invalid UTF-8 in an SSE line at byte {exc.start}") from None
        return events

    def lone_payload(self, chunk: bytes) -> bytes | None:
        """The data of ``chunk`` when it is exactly one whole ``data: ...`` event and nothing else is
        pending (the caller then reads it without ``feed``, which leaves the decoder as ``feed`` would
        have), else None: what one read of a streaming server nearly always is, read without splitting
        it into lines. Its bytes are not checked as UTF-8 here: the reader of the payload must."""
        if (
            chunk[:6] == b"data: "
            and chunk[-2:] == b"\n\n"
            and chunk.count(b"\n") == 2
            and b"\r" not in chunk
            and len(chunk) <= self._max_line
            and self._start_clean()
        ):
            return chunk[6:-2]
        return None

    def _lone_payloads(self, chunk: bytes) -> list[bytes] | None:
        """``lone_payload`` of a read of several whole one-line ``data:`` events (the last read of a
        stream: its last chunks and ``[DONE]``): the data of each, in order, else None."""
        if chunk[:6] != b"data: " or chunk[-2:] != b"\n\n" or b"\r" in chunk or len(chunk) > self._max_line:
            return None
        payloads = chunk[6:-2].split(b"\n\ndata: ")
        if chunk.count(b"\n") != 2 * len(payloads) or not self._start_clean():
            return None  # another line among them: a comment, an event type, a data line of two
        return payloads

    def _start_clean(self) -> bool:
        """``clean``, where a read that starts with ``data:`` also starts the stream (it has no
        byte-order mark): the first read of a stream takes the fast paths too."""
        if not self._started and not self._buffer and not self._skip_lf:
            self._started = True
        return self.clean

    @property
    def clean(self) -> bool:
        """Whether the next byte starts a new line of a new event: nothing pending, no event type set,
        no CR waiting for its LF (any read that ended with a blank line leaves the decoder so)."""
        return (
            self._started
            and not self._skip_lf
            and not self._buffer
            and not self._data
            and self._event is None
        )

    def _lines(self, lines: list[bytes], events: list[SseEvent]) -> None:
        # The hot path (one "data: {...}" line, then a blank line) stays inline: no call per line.
        limit, data, size = self._max_line, self._data, self._event_size
        for raw in lines:
            if len(raw) > limit:
                raise SseLineTooLongError(f"SSE line of {len(raw)} bytes, longer than {limit}")
            if raw[:6] == b"data: ":
                data.append(raw[6:].decode("utf-8"))
                size += len(raw) + LINE_COST_BYTES
                if size > limit:
                    raise SseEventTooLargeError(f"SSE event of more than {limit} bytes without an end")
            elif not raw:
                if data:
                    events.append(SseEvent("\n".join(data), self._event))
                    self._data = data = []
                    size = 0
                self._event = None
            elif self._field(raw):
                size += len(raw) + LINE_COST_BYTES
                if size > limit:
                    raise SseEventTooLargeError(f"SSE event of more than {limit} bytes without an end")
        self._event_size = size

    def _trim_start(self, chunk: bytes) -> bytes:
        if self._skip_lf and chunk:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if self._started or not chunk:
            return chunk
        # Until the stream's first three bytes are known, ``_buffer`` holds a possible byte-order mark,
        # which is not part of the first field name.
        head = self._buffer + chunk
        if len(head) < len(_BOM) and _BOM.startswith(head):
            self._buffer = head
            return b""
        self._started = True
        self._buffer = b""
        return head.removeprefix(_BOM)

    def _field(self, raw: bytes) -> bool:
        """Read a line that is not ``data: ...``; returns whether it was a data line after all."""
        if raw[:1] == b":":
            return False  # a comment: keep-alive pings
        name, colon, value = raw.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":  # "data:x" without the space, or "data" alone: an empty data line
            self._data.append(value.decode("utf-8"))
            return True
        if name == b"event":
            self._event = value.decode("utf-8")
        return False
