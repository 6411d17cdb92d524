"""Request bodies and chunk reading for both APIs, and which events count as tokens."""

from __future__ import annotations

import json
from typing import Any

import pytest

from exporter.settings.target import TargetSettings
from exporter.streams.decoder import StreamFailureError, StreamState
from exporter.streams.openai import FORMATS, Chunk, read_chunk
from exporter.streams.request import RequestSpec
from exporter.streams.result import Outcome, ProbeResult, TokenSource, intervals
from exporter.streams.sse import SseEvent
from exporter.streams.tokens import TokenCounter

SPEC = RequestSpec(prompt="hello", max_tokens=16)


def test_completions_body_asks_for_everything_configured() -> None:
    settings = TargetSettings(base_url="http://x", api="completions", extra_body=(("seed", 7),))
    body = FORMATS["completions"].build_body(settings, SPEC, "m")
    assert body == {
        "model": "m",
        "prompt": "hello",
        "max_tokens": 16,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "ignore_eos": True,
        "min_tokens": 16,
        "return_token_ids": True,
        "seed": 7,
    }
    assert "temperature" not in body


def test_chat_body_with_options_off_and_request_extras_winning() -> None:
    settings = TargetSettings(
        base_url="http://x",
        ignore_eos=False,
        send_min_tokens=False,
        request_token_ids=False,
        request_continuous_usage=False,
        extra_body=(("seed", 1), ("top_p", 0.5)),
    )
    spec = RequestSpec(
        prompt="unused",
        max_tokens=4,
        messages=(("system", "be brief"), ("user", "hi")),
        extra_body=(("seed", 2),),
    )
    body = FORMATS["chat"].build_body(settings, spec, "m")
    assert body["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    assert body["stream_options"] == {"include_usage": True}
    assert {"ignore_eos", "min_tokens", "return_token_ids"}.isdisjoint(body)
    assert (body["seed"], body["top_p"]) == (2, 0.5)


def test_chat_body_from_a_plain_prompt() -> None:
    body = FORMATS["chat"].build_body(TargetSettings(base_url="http://x"), SPEC, "m")
    assert body["messages"] == [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize(
    ("api", "obj", "expected"),
    [
        ("chat", {"choices": [{"delta": {"role": "assistant", "content": ""}}]}, Chunk()),
        ("chat", {"choices": [{"delta": {"content": " abc"}, "token_ids": [5]}]}, Chunk(" abc", token_ids=1)),
        ("chat", {"choices": [{"delta": {"reasoning_content": "hm"}}]}, Chunk(reasoning="hm")),
        ("chat", {"choices": [{"delta": {"reasoning": "hm"}}]}, Chunk(reasoning="hm")),
        (
            "chat",
            {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 9}},
            Chunk("", "", None, 9, 3),
        ),
        (
            "completions",
            {"choices": [{"text": " a", "finish_reason": "length"}]},
            Chunk(" a", finish_reason="length"),
        ),
        (
            "completions",
            {"choices": [{"text": ""}], "usage": {"completion_tokens": 2}},
            Chunk(completion_tokens=2),
        ),
        ("completions", {"error": {"message": "overloaded"}}, Chunk(error="overloaded")),
        (  # llama.cpp with timings_per_token: the cumulative count rides on every chunk
            "completions",
            {"choices": [{"text": "\u00dc"}], "timings": {"predicted_n": 7, "predicted_ms": 9.5}},
            Chunk("\u00dc", completion_tokens=7),
        ),
        (  # usage, where a chunk has it, is the count
            "completions",
            {"choices": [], "usage": {"completion_tokens": 8}, "timings": {"predicted_n": 8}},
            Chunk(completion_tokens=8),
        ),
    ],
)
def test_read_chunk(api: str, obj: dict[str, Any], expected: Chunk) -> None:
    assert read_chunk(FORMATS[api], obj) == expected  # type: ignore[index]


def test_read_chunk_rejects_a_non_object() -> None:
    with pytest.raises(ValueError, match="JSON object"):
        read_chunk(FORMATS["chat"], [1, 2])


def _state(api: str = "chat") -> StreamState:
    result = ProbeResult(api=api, sent_at=0.0, max_tokens=2)
    return StreamState(result, FORMATS[api], TokenCounter())  # type: ignore[index]


def _events(*objs: Any) -> list[SseEvent]:
    return [SseEvent(o if isinstance(o, str) else json.dumps(o)) for o in objs]


def test_inference_perf_392_only_content_events_are_tokens() -> None:
    """inference-perf #392: role-only deltas, empty chunks, usage-only chunks and [DONE] were counted as
    tokens, shifting TTFT earlier and adding ~0 gaps. None of them may produce a token stamp."""
    state = _state()
    role = {"choices": [{"delta": {"role": "assistant", "content": ""}}], "usage": {"completion_tokens": 0}}
    state.on_events(0.010, _events(role))
    state.on_events(0.020, _events({"choices": [{"delta": {}}]}))
    state.on_events(
        0.100, _events({"choices": [{"delta": {"content": " ab"}}], "usage": {"completion_tokens": 1}})
    )
    state.on_events(0.120, _events({"choices": [{"delta": {"content": " cd"}, "finish_reason": "length"}]}))
    usage = {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}}
    assert state.on_events(0.121, _events(usage, "[DONE]"))
    state.finish(exact_length=True)
    result = state.result
    assert result.token_times == [0.100, 0.120]
    assert intervals(result) == pytest.approx([0.100, 0.020])
    assert result.outcome is Outcome.OK and result.finished_at == 0.121
    assert (result.prompt_tokens_reported, result.completion_tokens_reported) == (4, 2)
    assert result.multi_event_reads == 0


def test_vllm_held_back_tokens_keep_the_count_exact() -> None:
    """vLLM sends a token whose text is an incomplete UTF-8 sequence as a chunk with its id and empty
    text (seen against vLLM 0.32 CPU; the real-engine suite found it): the token counts when its text
    shows, and one still held when the stream stops goes to the last content chunk."""
    state = _state("completions")
    state.result.max_tokens = 5

    def chunk(text: str, ids: int, finish: str | None = None) -> dict[str, Any]:
        choice = {"text": text, "token_ids": list(range(ids)), "finish_reason": finish}
        return {"choices": [choice]}

    state.on_events(0.10, _events(chunk(" a", 1)))
    state.on_events(0.12, _events(chunk("", 1)))
    state.on_events(0.14, _events(chunk("\u00dc", 1)))
    state.on_events(0.16, _events(chunk(" b", 1)))
    state.on_events(0.18, _events(chunk("", 1, "length")))
    usage = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}}
    state.on_events(0.19, _events(usage, "[DONE]"))
    state.finish(exact_length=True)
    result = state.result
    assert result.token_source is TokenSource.TOKEN_IDS
    assert result.token_times == [0.10, 0.14, 0.16] and result.token_counts == [1, 2, 2]
    assert result.output_tokens == result.completion_tokens_reported == 5
    assert result.token_adjustment == 0 and result.extra["held_tokens_at_end"] == 1
    assert result.outcome is Outcome.OK


def test_reasoning_is_recorded_apart() -> None:
    state = _state()
    state.on_events(0.05, _events({"choices": [{"delta": {"reasoning_content": "think"}}]}))
    state.on_events(0.08, _events({"choices": [{"delta": {"content": " x"}}]}))
    state.on_events(0.09, _events({"choices": [{"delta": {"content": " y"}}]}, "[DONE]"))
    state.finish(exact_length=False)
    assert state.result.reasoning_times == [0.05]
    assert state.result.token_times == [0.08, 0.09]
    assert state.result.extra["reasoning_tokens"] == 1


def test_a_read_with_two_content_events_is_counted() -> None:
    state = _state("completions")
    state.on_events(0.1, _events({"choices": [{"text": " a"}]}, {"choices": [{"text": " b"}]}))
    assert state.result.multi_event_reads == 1 and state.result.merged_events == 2
    assert state.result.token_times == [0.1, 0.1]


def test_a_read_of_events_that_came_within_3_ms_is_not_counted() -> None:
    """Its bytes all came after the previous token's read: its events arrived at most its stamp minus
    that read's apart, and within 3 ms a merged read is as good as two on a loop on time."""
    state = _state("completions")
    two = ({"choices": [{"text": " a"}]}, {"choices": [{"text": " b"}]})
    state.on_events(0.100, _events({"choices": [{"text": " x"}]}))
    state.on_events(0.1025, _events(*two))  # 2.5 ms after the last token read
    assert state.result.multi_event_reads == 0
    state.on_events(0.110, _events(*two))  # 7.5 ms: the first may have come 7.5 ms before its stamp
    assert state.result.multi_event_reads == 1 and state.result.merged_events == 2  # the counted read's
    assert state.result.token_times == [0.100, 0.1025, 0.1025, 0.110, 0.110]


def test_the_first_read_of_events_is_bounded_by_the_headers() -> None:
    two = ({"choices": [{"text": " a"}]}, {"choices": [{"text": " b"}]})
    state = _state("completions")
    state.result.sent_at, state.result.headers_at = 0.0, 0.050
    state.on_events(0.052, _events(*two))
    assert state.result.multi_event_reads == 0  # both came within 2 ms of the headers' read
    # Headers read with the tokens (a late read of all three): only the send bounds them.
    state = _state("completions")
    state.result.sent_at, state.result.headers_at = 0.0, 0.080
    state.on_events(0.080, _events(*two))
    assert state.result.multi_event_reads == 1


@pytest.mark.parametrize(
    ("data", "outcome"),
    [('{"choices": [{"text": "', Outcome.MALFORMED_STREAM), ('{"error": "boom"}', Outcome.STREAM_ABORTED)],
)
def test_bad_chunks_end_the_stream(data: str, outcome: Outcome) -> None:
    with pytest.raises(StreamFailureError) as caught:
        _state("completions").on_events(0.1, [SseEvent(data)])
    assert caught.value.outcome is outcome


@pytest.mark.parametrize(
    ("reported", "finish", "counts", "outcome", "short"),
    [
        (2, "length", [1, 1], Outcome.OK, None),
        # A stream the server stopped before max_tokens completed: a workload's shortfall, not a failure.
        (1, "stop", [1], Outcome.OK, 1),  # usage says fewer than asked
        (None, "length", [1], Outcome.OK, None),  # by chunks a count is a lower bound: "length" decides
        (None, "stop", [1], Outcome.OK, 1),
        (None, None, [], Outcome.NO_TOKENS, None),
    ],
)
def test_completed_outcomes(
    reported: int | None, finish: str | None, counts: list[int], outcome: Outcome, short: int | None
) -> None:
    state = _state("completions")
    for i in range(len(counts)):
        state.on_events(0.1 * (i + 1), _events({"choices": [{"text": " a"}]}))
    if reported is not None:
        state.on_events(0.5, _events({"choices": [], "usage": {"completion_tokens": reported}}))
    state.result.finish_reason = finish
    state.finish(exact_length=True)
    assert state.result.outcome is outcome and state.result.error is None
    assert state.result.extra.get("short_of_max_tokens") == short
    assert state.result.token_source is TokenSource.CHUNKS


def test_llama_cpp_usage_in_the_final_content_chunk_without_include_usage() -> None:
    """llama.cpp's /v1/completions puts usage in its last content chunk even when not asked to."""
    state = _state("completions")
    state.result.max_tokens = 3
    state.on_events(0.1, _events({"choices": [{"text": " ab"}]}))
    state.on_events(0.2, _events({"choices": [{"text": " cd"}]}))
    last = {"choices": [{"text": " e", "finish_reason": "length"}], "usage": {"completion_tokens": 3}}
    state.on_events(0.3, _events(last, "[DONE]"))
    state.finish(exact_length=True)
    result = state.result
    assert result.token_source is TokenSource.CHUNKS
    assert (result.token_counts, result.token_adjustment, result.outcome) == ([1, 1, 1], 0, Outcome.OK)


def test_chat_role_chunk_first_with_continuous_usage() -> None:
    """vLLM chat with continuous usage: the role chunk carries usage 0 and is no token."""
    state = _state("chat")
    role = {"choices": [{"delta": {"role": "assistant", "content": ""}}], "usage": {"completion_tokens": 0}}
    first = {"choices": [{"delta": {"content": " ab cd"}}], "usage": {"completion_tokens": 2}}
    state.on_events(0.1, _events(role, first))
    state.on_events(
        0.2, _events({"choices": [{"delta": {"content": " e"}}], "usage": {"completion_tokens": 3}})
    )
    state.finish(exact_length=False)
    assert state.result.token_source is TokenSource.CONTINUOUS_USAGE
    assert state.result.token_counts == [2, 1] and state.result.multi_event_reads == 0
