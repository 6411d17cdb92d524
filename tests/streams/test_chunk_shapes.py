"""The typed fast path reads every chunk exactly as ``read_chunk`` does, or declines it, and a stream
accounted on it ends as on the general path."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.streams.chunk_shapes import FAST_READERS, chat_chunk, completion_chunk, plain_template
from exporter.streams.decoder import StreamFailureError, StreamState, loads
from exporter.streams.openai import FORMATS, Chunk, read_chunk
from exporter.streams.result import ProbeResult
from exporter.streams.sse import SseEvent
from exporter.streams.tokens import TokenCounter

FAST = {"completions": completion_chunk, "chat": chat_chunk}


def general(api: str, data: str) -> Chunk | str:
    """What the general path says: a Chunk, or the error it raises."""
    try:
        return read_chunk(FORMATS[api], loads(data))
    except ValueError as exc:
        return f"error: {exc}"


def fast_read(api: str, data: str) -> Chunk | None:
    """What the fast path says, as a Chunk (a plain chunk's text alone is ``Chunk(text)``)."""
    fast = FAST[api](data)
    return Chunk(fast) if isinstance(fast, str) else fast


def agrees(api: str, obj: Any) -> bool:
    data = json.dumps(obj)
    fast = fast_read(api, data)
    return fast is None or fast == general(api, data)


COMMON = [
    {"id": "c", "object": "text_completion", "choices": [{"index": 0, "text": " a", "logprobs": None}]},
    {"choices": [{"text": " a", "finish_reason": None, "stop_reason": None}], "usage": None},
    {"choices": [{"text": "", "finish_reason": "length"}]},
    {"choices": [], "usage": {"completion_tokens": 64, "prompt_tokens": 3, "total_tokens": 67}},
    {"choices": [{"text": "x", "token_ids": [1, 2, 3]}], "usage": {"completion_tokens": 3}},
    {"choices": [{"text": "x"}], "usage": {"prompt_tokens_details": {"cached_tokens": 7}}},
    {"choices": [{"text": None}]},
    {"choices": [{"delta": {"content": "hi"}, "finish_reason": None}]},
    {"choices": [{"delta": {"role": "assistant", "content": ""}}]},
    {"choices": [{"delta": {"reasoning_content": "think"}}]},
    {"choices": [{"delta": {"reasoning": "think", "content": None}}]},
    {"choices": [{"delta": None}]},
]

DECLINED = [
    {"choices": [{"text": 5, "delta": {"content": 5}}]},  # a field of another type: read_chunk decides
    {"choices": [{"text": "x"}], "usage": {"completion_tokens": True}},
    {"choices": [{"text": "x"}], "usage": {"completion_tokens": 3.0}},
    {"choices": [{"text": "x"}], "timings": {"predicted_n": 4, "cache_n": 1}},  # llama.cpp
    {"choices": [], "error": {"message": "boom"}},
    {"error": "boom"},
    {"choices": None},
    {"choices": [None]},
    [1, 2],
    "text",
]
DECLINED_CASES = [(api, obj) for api in sorted(FAST) for obj in DECLINED] + [
    ("chat", {"choices": [{"delta": {"tool_calls": [{"function": {"arguments": "{"}}]}}]}),
]


@pytest.mark.parametrize("api", sorted(FAST))
@pytest.mark.parametrize("obj", COMMON, ids=lambda o: json.dumps(o)[:40])
def test_common_shapes_take_the_fast_path_and_agree(api: str, obj: Any) -> None:
    data = json.dumps(obj)
    fast = fast_read(api, data)
    if api == "completions" and "delta" in json.dumps(obj):
        assert fast is None or fast == general(api, data)  # a chat chunk sent to completions
        return
    assert fast is not None
    assert fast == general(api, data)


@pytest.mark.parametrize(("api", "obj"), DECLINED_CASES, ids=lambda o: json.dumps(o)[:40])
def test_shapes_with_a_decision_to_make_are_left_to_read_chunk(api: str, obj: Any) -> None:
    assert FAST[api](json.dumps(obj)) is None


@pytest.mark.parametrize(
    ("api", "obj"),
    [
        ("completions", {"id": "c", "choices": [{"index": 0, "text": " a", "logprobs": None}]}),
        ("chat", {"choices": [{"index": 0, "delta": {"content": " a"}, "finish_reason": None}]}),
    ],
)
def test_a_plain_token_chunk_comes_back_as_its_text_alone(api: str, obj: Any) -> None:
    assert FAST[api](json.dumps(obj)) == " a"


@pytest.mark.parametrize(
    "obj",
    [
        {"choices": [{"text": " a", "finish_reason": "length"}]},
        {"choices": [{"text": " a", "token_ids": [7]}]},
        {"choices": [{"text": " a"}], "usage": {"completion_tokens": 1}},
        {"choices": [{"text": ""}]},
    ],
    ids=lambda o: json.dumps(o)[:40],
)
def test_a_chunk_that_says_more_than_its_text_is_a_chunk(obj: Any) -> None:
    assert isinstance(completion_chunk(json.dumps(obj)), Chunk)


def test_invalid_json_is_declined() -> None:
    assert completion_chunk('{"choices": [') is None
    assert chat_chunk("NaN") is None


def test_the_fast_readers_cover_the_choice_apis_only() -> None:
    assert set(FAST_READERS) == {FORMATS["completions"].path, FORMATS["chat"].path}


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 300), st.floats(allow_nan=False), st.text(max_size=4)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["text", "content"]), inner, max_size=2)
    ),
    max_leaves=6,
)
DELTA = st.dictionaries(
    st.sampled_from(["content", "reasoning_content", "reasoning", "role", "tool_calls"]), VALUES, max_size=3
)
CHOICE = st.dictionaries(
    st.sampled_from(["text", "finish_reason", "token_ids", "index", "logprobs"]), VALUES, max_size=4
).flatmap(lambda c: st.one_of(st.just(c), DELTA.map(lambda d: c | {"delta": d}), VALUES))
USAGE = st.one_of(
    VALUES,
    st.fixed_dictionaries(
        {},
        optional={
            "completion_tokens": VALUES,
            "prompt_tokens": VALUES,
            "prompt_tokens_details": st.one_of(VALUES, st.fixed_dictionaries({"cached_tokens": VALUES})),
        },
    ),
)
CHUNK = st.fixed_dictionaries(
    {},
    optional={
        "id": st.text(max_size=3),
        "choices": st.one_of(st.lists(CHOICE, max_size=2), VALUES),
        "usage": USAGE,
        "timings": VALUES,
        "error": VALUES,
    },
)


@settings(max_examples=400, deadline=None)
@given(obj=CHUNK, api=st.sampled_from(sorted(FAST)))
def test_any_chunk_the_fast_path_reads_it_reads_as_read_chunk_does(obj: dict[str, Any], api: str) -> None:
    assert agrees(api, obj)


def account(api: str, payloads: list[str], *, fast: bool, batch: int = 0) -> tuple[object, ...]:
    """A stream of one-event reads through ``StreamState``: each read on the fast path where it
    takes it (``on_payload``), else (and always, when not ``fast``) through ``on_events``. With
    ``batch``, runs of that many reads go to ``on_payloads`` first, as the reader hands it the lone
    events the transport kept, and the first it does not take goes on its own."""
    state = StreamState(ProbeResult(api=api, max_tokens=8), FORMATS[api], TokenCounter())  # type: ignore[arg-type]
    index = 0
    while index < len(payloads):
        if batch:
            run = [(float(i), p.encode()) for i, p in enumerate(payloads) if index <= i < index + batch]
            taken_together = state.on_payloads(run)
            index += taken_together
            if taken_together == len(run):
                continue
        now, data = float(index), payloads[index]
        try:
            taken = fast and state.on_payload(now, data.encode()) is not None
            if not taken:
                state.on_events(now, [SseEvent(data)])
        except StreamFailureError as exc:
            return ("failed", exc.outcome, index)
        index += 1
    result, counter = state.result, state.counter
    return (
        result.token_times,
        result.token_counts,
        result.reasoning_times,
        result.finish_reason,
        result.completion_tokens_reported,
        result.prompt_tokens_reported,
        result.prompt_tokens_cached,
        state.token_reads,
        state.has_token,
        counter.source,
        counter.fallback_chunks,
        counter.reasoning_tokens,
        counter.needs_reconciling(),
    )


def well_formed(api: str, text: str, usage: int | None, ids: int | None) -> dict[str, Any]:
    """A token chunk as servers send them: plain, or with continuous usage or token ids."""
    choice: dict[str, Any] = {"text": text} if api == "completions" else {"delta": {"content": text}}
    if ids is not None:
        choice["token_ids"] = list(range(ids))
    return {"choices": [choice]} | ({"usage": {"completion_tokens": usage}} if usage is not None else {})


def stream_chunks(api: str) -> st.SearchStrategy[list[dict[str, Any]]]:
    token = st.builds(
        well_formed,
        st.just(api),
        st.sampled_from([" a", "", "ab"]),
        st.one_of(st.none(), st.integers(0, 9)),
        st.one_of(st.none(), st.integers(0, 3)),
    )
    return st.lists(st.one_of(token, token, CHUNK), min_size=1, max_size=8)


MIXED_STREAMS = {
    # A plain chunk between chunks with continuous usage: the next usage counts from it.
    "usage, plain, usage": [(" a", 3, None), (" a", None, None), (" a", 9, None)],
    # Between chunks listing token ids, and after held ids of a text-less chunk.
    "ids, plain, held ids, ids": [(" a", None, 2), (" a", None, None), ("", None, 3), (" a", None, 1)],
    "plain, then usage": [(" a", None, None), (" a", None, None), ("ab", 5, None)],
}


@pytest.mark.parametrize("api", sorted(FAST))
@pytest.mark.parametrize("stream", MIXED_STREAMS.values(), ids=list(MIXED_STREAMS))
def test_plain_chunks_among_counted_ones_are_accounted_as_on_the_general_path(
    api: str, stream: list[tuple[str, int | None, int | None]]
) -> None:
    payloads = [json.dumps(well_formed(api, *chunk)) for chunk in stream]
    general = account(api, payloads, fast=False)
    assert account(api, payloads, fast=True) == general
    for batch in (1, 2, 3):
        assert account(api, payloads, fast=True, batch=batch) == general


@settings(max_examples=400, deadline=None)
@given(data=st.data(), api=st.sampled_from(sorted(FAST)))
def test_a_stream_on_the_fast_path_is_accounted_as_on_the_general_one(api: str, data: st.DataObject) -> None:
    payloads = [json.dumps(chunk) for chunk in data.draw(stream_chunks(api))]
    general = account(api, payloads, fast=False)
    assert account(api, payloads, fast=True) == general
    assert account(api, payloads, fast=True, batch=data.draw(st.integers(1, 8))) == general


@pytest.mark.parametrize("api", sorted(FAST))
def test_a_run_of_plain_chunks_is_read_in_one_go_up_to_the_first_other(api: str) -> None:
    plain = [json.dumps(well_formed(api, " a", None, None)), json.dumps(well_formed(api, "ab", None, None))]
    other = json.dumps(well_formed(api, " a", 4, None))
    run = [(float(i), p.encode()) for i, p in enumerate([*plain, other, plain[0]])]
    state = StreamState(ProbeResult(api=api, max_tokens=8), FORMATS[api], TokenCounter())  # type: ignore[arg-type]
    assert state.on_payloads(run) == 2
    assert state.result.token_times == [0.0, 1.0] and state.token_reads == 2


@pytest.mark.parametrize(
    "payloads",
    [
        pytest.param([b'{"choices": [{"text": "a"}]}, {}', b"{}"], id="two documents in one payload"),
        pytest.param([b'{"choices": [{"text": "a"}]}', b""], id="an empty payload"),
        pytest.param([b'{"choices": [{"text": "\xff"}]}'], id="invalid UTF-8"),
        pytest.param([b'{"choices": [{"text": 1}]}'], id="a text that is not a string"),
    ],
)
def test_a_run_the_batch_cannot_read_is_left_whole_to_the_one_by_one_path(payloads: list[bytes]) -> None:
    state = StreamState(ProbeResult(api="completions", max_tokens=8), FORMATS["completions"], TokenCounter())  # type: ignore[arg-type]
    assert state.on_payloads([(float(i), p) for i, p in enumerate(payloads)]) == 0
    assert state.result.token_times == []


# -- templates (plain_template): the chunks that differ from a stream's first in their text alone ------


PATHS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
NOT_ESCAPED = st.text(  # what JSON writes as it is (no surrogates: UTF-8 has none)
    st.characters(blacklist_characters='"\\', blacklist_categories=("Cs",), min_codepoint=0x20),
    min_size=1,
    max_size=12,
)


def vllm_chunk(api: str, text: str, *, ensure_ascii: bool = False, **fields: Any) -> bytes:
    """A plain chunk as vLLM writes it (id, time and model repeated in every chunk), as event data."""
    choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": None}
    choice |= {"text": text, "stop_reason": None} if api == "completions" else {"delta": {"content": text}}
    chunk = {
        "id": "cmpl-7f3a",
        "object": "x",
        "created": 1700000000,
        "model": "m",
        "choices": [choice],
    } | fields
    return json.dumps(chunk, ensure_ascii=ensure_ascii).encode()


@settings(max_examples=300, deadline=None)
@given(api=st.sampled_from(sorted(FAST)), first=NOT_ESCAPED, other=NOT_ESCAPED)
def test_a_templates_slot_reads_any_text_with_nothing_escaped_as_its_own(
    api: str, first: str, other: str
) -> None:
    template = plain_template(PATHS[api], vllm_chunk(api, first), first)
    assert template is not None, "a plain chunk whose text JSON does not escape always has one"
    prefix, suffix = template
    data = (prefix + other.encode() + suffix).decode()
    assert data == vllm_chunk(api, other).decode()  # the chunk the server writes for that text
    assert FAST[api](data) == other and general(api, data) == Chunk(other)  # plain, on both paths


@pytest.mark.parametrize("api", sorted(FAST))
@pytest.mark.parametrize("text", ["m", "fluidity template check"])  # the second: the text the check puts in
def test_the_template_is_the_texts_slot_even_where_another_field_holds_the_same_string(
    api: str, text: str
) -> None:
    data = vllm_chunk(api, text, id=text, model=text)  # the id and the model are the text too
    template = plain_template(PATHS[api], data, text)
    assert template is not None
    prefix, suffix = template
    assert FAST[api]((prefix + b"other" + suffix).decode()) == "other"
    assert f'"id": "{text}"'.encode() in prefix and f'"model": "{text}"'.encode() in prefix  # as they were


@pytest.mark.parametrize("api", sorted(FAST))
@pytest.mark.parametrize(
    ("text", "ensure_ascii"),
    [
        pytest.param('say "hi"', False, id="a quote"),
        pytest.param("a\nb", False, id="a line break"),
        pytest.param("back\\slash", False, id="a backslash"),
        pytest.param("w\u00f6rld", True, id="non-ASCII written as \\u escapes"),
        pytest.param("", False, id="no text"),
        pytest.param("\ud800", True, id="a lone surrogate"),
    ],
)
def test_no_template_where_the_text_is_escaped_or_empty(api: str, text: str, ensure_ascii: bool) -> None:
    assert plain_template(PATHS[api], vllm_chunk(api, text, ensure_ascii=ensure_ascii), text) is None


@pytest.mark.parametrize("api", sorted(FAST))
def test_no_template_from_a_chunk_that_says_more_than_its_text(api: str) -> None:
    with_usage = vllm_chunk(api, " a", usage={"completion_tokens": 3})
    assert plain_template(PATHS[api], with_usage, " a") is None  # the check text would not come back plain
    assert plain_template("/v1/responses", vllm_chunk(api, " a"), " a") is None  # no fast reader there
    assert plain_template(PATHS[api], vllm_chunk(api, " a"), " b") is None  # not its text
