"""The SSE decoder: the event-stream rules, and the property that read boundaries never matter."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.streams.limits import LINE_COST_BYTES
from exporter.streams.sse import (
    DONE,
    SseDecoder,
    SseEvent,
    SseEventTooLargeError,
    SseInvalidUtf8Error,
    SseLineTooLongError,
)


def decode(*reads: bytes, max_line: int = 1 << 20) -> list[SseEvent]:
    decoder = SseDecoder(max_line)
    return [event for read in reads for event in decoder.feed(read)]


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        (b"data: a\n\n", [SseEvent("a")]),
        (b"data: a\r\n\r\n", [SseEvent("a")]),
        (b"data: a\r\rdata: b\r\r", [SseEvent("a"), SseEvent("b")]),
        (b"data:a\n\n", [SseEvent("a")]),  # the space after the colon is optional
        (b"data:  a\n\n", [SseEvent(" a")]),  # only one space is removed
        (b"data: a\ndata: b\n\n", [SseEvent("a\nb")]),  # multi-line data joined with \n
        (b": ping\n\ndata: a\n\n", [SseEvent("a")]),  # comment pings are skipped
        (b": ping\n: ping\n\n", []),
        (b"event: usage\ndata: {}\n\n", [SseEvent("{}", "usage")]),
        (b"id: 7\nretry: 10\ndata: x\n\n", [SseEvent("x")]),
        (b"data\n\n", [SseEvent("")]),
        (b"event: e\n\n", []),  # no data, no event
        (b"data: [DONE]\n\n", [SseEvent("[DONE]")]),
        (b"\xef\xbb\xbfdata: a\n\n", [SseEvent("a")]),  # a byte-order mark opens the stream
        ("data: caf\u00e9 \u4e2d\U0001f600\n\n".encode(), [SseEvent("caf\u00e9 \u4e2d\U0001f600")]),
    ],
)
def test_event_stream_rules(stream: bytes, expected: list[SseEvent]) -> None:
    assert decode(stream) == expected


def test_done_sentinel() -> None:
    assert decode(b"data: [DONE]\n\n")[0].done
    assert not decode(b"data: [DONE] \n\n")[0].done


def test_crlf_split_across_reads_is_one_line_end() -> None:
    assert decode(b"data: a\r", b"\n\r", b"\n") == [SseEvent("a")]


def test_code_point_split_across_reads() -> None:
    raw = "data: \u4e2d\U0001f600\n\n".encode()
    for cut in range(len(raw)):
        assert decode(raw[:cut], raw[cut:]) == [SseEvent("\u4e2d\U0001f600")]


def test_unfinished_event_is_pending_not_dispatched() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: a\n") == []
    assert decoder.pending
    assert decoder.feed(b"\n") == [SseEvent("a")]
    assert not decoder.pending


def test_invalid_utf8_is_an_error() -> None:
    with pytest.raises(SseInvalidUtf8Error, match="invalid UTF-8"):
        decode(b'data: {"text":"\xff\xfe"}\n\n')


def test_oversized_line_is_an_error_whole_or_growing() -> None:
    with pytest.raises(SseLineTooLongError, match="longer than 100"):
        decode(b"data: " + b"a" * 200 + b"\n\n", max_line=100)
    decoder = SseDecoder(100)
    decoder.feed(b"data: " + b"a" * 90)
    with pytest.raises(SseLineTooLongError, match="without an end"):
        decoder.feed(b"a" * 20)


# -- property: any split of the bytes into reads gives the same events --------------------------

_text = st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=12)
_line = st.one_of(
    st.tuples(st.just("data"), _text),
    st.tuples(st.just("comment"), _text),
    st.tuples(st.just("event"), _text),
)
_event = st.lists(_line, max_size=4)
_endings = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def streams(draw: st.DrawFn) -> tuple[bytes, list[SseEvent]]:
    """A random event stream as bytes, and the events it must decode to."""
    lines: list[str] = []
    expected: list[SseEvent] = []
    for event in draw(st.lists(_event, max_size=6)):
        data, name = [], None
        for kind, value in event:
            if kind == "data":
                spaced = draw(st.booleans())
                lines.append(("data: " if spaced else "data:") + value)
                # Without the space, a value's own leading space is the one the decoder removes.
                data.append(value if spaced or not value.startswith(" ") else value[1:])
            elif kind == "comment":
                lines.append(":" + value)
            else:
                lines.append("event: " + value)
                name = value
        lines.append("")
        if data:
            expected.append(SseEvent("\n".join(data), name))
    endings = [draw(_endings) for _ in lines]
    for i in range(1, len(lines)):
        # A lone CR followed by an empty line ended with LF would read as one CRLF.
        if endings[i - 1] == "\r" and lines[i] == "" and endings[i] == "\n":
            endings[i] = "\r\n"
    bom = "\ufeff" if draw(st.booleans()) else ""
    raw = (bom + "".join(line + end for line, end in zip(lines, endings, strict=True))).encode()
    return raw, expected


@pytest.mark.parametrize(
    "line", [b"data: x\n", b"data:x\n", b"data\n"], ids=["data-space", "data-colon", "data-alone"]
)
def test_an_event_of_endless_short_lines_is_an_error_however_it_comes(line: bytes) -> None:
    """One event of a million one-byte ``data:`` lines and no blank line once grew a client to 8.5 GB:
    each line is charged its bytes and ``LINE_COST_BYTES``, so the event ends at the line bound."""
    decoder = SseDecoder(max_line_bytes=4096)
    lines_allowed = 4096 // (len(line) - 1 + LINE_COST_BYTES)
    for _ in range(lines_allowed):
        assert decoder.feed(line) == []
    with pytest.raises(SseEventTooLargeError, match="SSE event of more than 4096 bytes without an end"):
        decoder.feed(line)


def test_an_event_within_the_bound_is_dispatched_and_the_next_starts_afresh() -> None:
    decoder = SseDecoder(max_line_bytes=4096)
    event = b"data: x\n" * 40 + b"\n"  # 40 * (7 + 64) = 2840 bytes charged
    for _ in range(3):  # the charge of one event is not carried into the next
        assert decoder.feed(event) == [SseEvent("\n".join(["x"] * 40))]


@given(streams(), st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
def test_any_split_of_a_stream_gives_the_same_events(
    stream: tuple[bytes, list[SseEvent]], cuts: list[int]
) -> None:
    raw, expected = stream
    bounds = sorted({0, len(raw), *(c % (len(raw) + 1) for c in cuts)})
    reads = [raw[a:b] for a, b in itertools.pairwise(bounds)]
    assert decode(*reads) == expected
    assert decode(raw) == expected
    assert decode(*(raw[i : i + 1] for i in range(len(raw)))) == expected


@pytest.mark.parametrize(
    ("reads", "expected"),
    [
        # One whole event per read: the fast path, event after event.
        ((b'data: {"a":1}\n\n', b"data: [DONE]\n\n"), [SseEvent('{"a":1}'), SseEvent(DONE)]),
        # An ``event:`` line pending from the read before: the event keeps its type.
        ((b"event: delta\n", b"data: x\n\n"), [SseEvent("x", "delta")]),
        # A data line pending from the read before: both lines join.
        ((b"data: a\n", b"data: b\n\n"), [SseEvent("a\nb")]),
        # A CR inside is a line end, not data.
        ((b"data: a\rdata: b\n\n",), [SseEvent("a\nb")]),
        # Leftover bytes of an unfinished line.
        ((b"da", b"ta: x\n\n"), [SseEvent("x")]),
        # Several whole events in one read (a stream's last read): the fast path, each event.
        ((b"data: a\n\ndata: b\n\ndata: [DONE]\n\n",), [SseEvent("a"), SseEvent("b"), SseEvent(DONE)]),
        # ... unless another line is among them: a comment, an event type, a second data line.
        ((b"data: a\n\n: ping\n\ndata: b\n\n",), [SseEvent("a"), SseEvent("b")]),
        ((b"data: a\n\nevent: x\ndata: b\n\n",), [SseEvent("a"), SseEvent("b", "x")]),
        ((b"data: a\n\ndata: b\ndata: c\n\n",), [SseEvent("a"), SseEvent("b\nc")]),
        ((b"data: a\n\n\n\ndata: b\n\n",), [SseEvent("a"), SseEvent("b")]),
        # A byte-order mark starts the stream (whole or split), never a later read.
        ((b"\xef\xbb\xbfdata: a\n\n",), [SseEvent("a")]),
        ((b"\xef\xbb", b"\xbfdata: a\n\n"), [SseEvent("a")]),
        ((b"data: a\n\n", b"\xef\xbb\xbfdata: b\n\n"), [SseEvent("a")]),
    ],
)
def test_a_read_that_is_one_whole_event_decodes_like_any_other(
    reads: tuple[bytes, ...], expected: list[SseEvent]
) -> None:
    assert decode(*reads) == expected


def test_a_first_read_taken_by_the_fast_path_starts_the_stream() -> None:
    """The reader takes a lone event's data without ``feed`` (``lone_payload``), the first read too:
    the decoder must count the stream as started, so a byte-order mark later is not stripped."""
    decoder = SseDecoder(1024)
    assert decoder.lone_payload(b"data: a\n\n") == b"a"
    assert decoder.feed(b"\xef\xbb\xbfdata: b\n\n") == []  # a field named "\ufeffdata": ignored
    assert decoder.lone_payload(b"data: c\n\n") == b"c"
