"""The Responses API and tool-call streams: reading their events, their outcomes, and live against the
simulator (text, tool calls, faults in the event stream, cached prompt tokens)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from exporter.probe.client import ProbeClient
from exporter.settings.target import TargetSettings
from exporter.sim import SimServer
from exporter.streams.decoder import StreamFailureError, StreamState
from exporter.streams.openai import FORMATS, TOOL_NAME, Chunk, read_chunk
from exporter.streams.request import RequestSpec, Timeouts
from exporter.streams.result import Outcome, ProbeResult, TokenSource
from exporter.streams.sse import SseEvent
from exporter.streams.tokens import TokenCounter
from tests.probe.helpers import fault, settings_for

RESPONSES = FORMATS["responses"]
FAST = Timeouts(connect=1.0, ttft=2.0, idle=1.0, total=5.0)


def _completed(
    output: int, cached: int = 0, kind: str = "response.completed", **extra: Any
) -> dict[str, Any]:
    usage = {"input_tokens": 9, "input_tokens_details": {"cached_tokens": cached}, "output_tokens": output}
    return {"type": kind, "response": {"status": kind.removeprefix("response."), "usage": usage, **extra}}


@pytest.mark.parametrize(
    ("obj", "event", "expected"),
    [
        ({"type": "response.created", "response": {}}, None, Chunk()),
        ({"type": "response.output_text.delta", "delta": " ab"}, None, Chunk(" ab")),
        ({"delta": " ab"}, "response.output_text.delta", Chunk(" ab")),  # type from the SSE event line
        ({"type": "response.output_text.delta", "delta": ""}, None, Chunk()),
        ({"type": "response.reasoning_text.delta", "delta": "hm"}, None, Chunk(reasoning="hm")),
        ({"type": "response.function_call_arguments.delta", "delta": "{"}, None, Chunk("{", tool=True)),
        (
            _completed(7, cached=4),
            None,
            Chunk(completion_tokens=7, prompt_tokens=9, finish_reason="stop", cached_tokens=4, end=True),
        ),
        (
            _completed(7, kind="response.incomplete", incomplete_details={"reason": "max_output_tokens"}),
            None,
            Chunk(completion_tokens=7, prompt_tokens=9, finish_reason="length", cached_tokens=0, end=True),
        ),
        (
            _completed(2, kind="response.incomplete", incomplete_details={"reason": "content_filter"}),
            None,
            Chunk(
                completion_tokens=2,
                prompt_tokens=9,
                finish_reason="content_filter",
                cached_tokens=0,
                end=True,
                incomplete="content_filter",
            ),
        ),
        (  # vLLM: an answer cut at max_output_tokens ends with a completed event of status incomplete
            {
                "type": "response.completed",
                "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}},
            },
            None,
            Chunk(finish_reason="length", end=True),
        ),
        (
            {"type": "response.failed", "response": {"status": "failed", "error": {"message": "oom"}}},
            None,
            Chunk(error="oom"),
        ),
        ({"type": "error", "code": "server_error", "message": "boom"}, "error", Chunk(error="boom")),
    ],
)
def test_read_responses_events(obj: dict[str, Any], event: str | None, expected: Chunk) -> None:
    assert read_chunk(RESPONSES, obj, event) == expected


@pytest.mark.parametrize(
    ("delta", "expected"),
    [
        ({"role": "assistant", "content": ""}, ("", "", False)),
        (  # the opening tool-call delta names the function: no token
            {
                "tool_calls": [
                    {"index": 0, "id": "c", "type": "function", "function": {"name": "f", "arguments": ""}}
                ]
            },
            ("", "", False),
        ),
        ({"tool_calls": [{"index": 0, "function": {"arguments": '{"q'}}]}, ('{"q', "", True)),
        ({"content": None, "tool_calls": [{"index": 0, "function": {"arguments": "x"}}]}, ("x", "", True)),
    ],
)
def test_chat_tool_call_deltas(delta: dict[str, Any], expected: tuple[str, str, bool]) -> None:
    chunk = read_chunk(FORMATS["chat"], {"choices": [{"delta": delta}]})
    assert (chunk.text, chunk.reasoning, chunk.tool) == expected


def test_chat_usage_reads_cached_prompt_tokens() -> None:
    usage = {"prompt_tokens": 40, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 32}}
    chunk = read_chunk(FORMATS["chat"], {"choices": [], "usage": usage})
    assert (chunk.prompt_tokens, chunk.cached_tokens) == (40, 32)


def _state(max_tokens: int = 3) -> StreamState:
    return StreamState(ProbeResult(api="responses", max_tokens=max_tokens), RESPONSES, TokenCounter())


def _events(*objs: dict[str, Any]) -> list[SseEvent]:
    return [SseEvent(json.dumps(obj), obj.get("type")) for obj in objs]


def _delta(text: str) -> dict[str, Any]:
    return {"type": "response.output_text.delta", "delta": text}


def test_responses_stream_ends_at_its_completed_event_with_the_usage() -> None:
    state = _state()
    assert not state.on_events(0.1, _events({"type": "response.created"}, _delta(" a")))
    assert state.on_events(0.2, _events(_delta(" b"), _completed(3, cached=16), _delta(" ignored")))
    state.finish()
    result = state.result
    assert result.token_times == [0.1, 0.2] and result.finished_at == 0.2
    assert result.token_counts == [1, 2] and result.token_adjustment == 1  # reconciled with output_tokens
    assert result.prompt_tokens_cached == 16 and result.outcome is Outcome.OK


def test_an_incomplete_response_for_another_reason_is_truncated() -> None:
    state = _state()
    incomplete = _completed(1, kind="response.incomplete", incomplete_details={"reason": "content_filter"})
    assert state.on_events(0.1, _events(_delta(" a"), incomplete))
    state.finish()
    assert state.result.outcome is Outcome.TRUNCATED
    assert "content_filter" in (state.result.error or "")


@pytest.mark.parametrize(
    "obj",
    [
        {"type": "response.failed", "response": {"error": {"code": "x", "message": "engine died"}}},
        {"type": "error", "message": "engine died"},
    ],
)
def test_failed_and_error_events_abort_the_stream(obj: dict[str, Any]) -> None:
    state = _state()
    with pytest.raises(StreamFailureError) as caught:
        state.on_events(0.1, _events(_delta(" a"), obj))
    assert caught.value.outcome is Outcome.STREAM_ABORTED and "engine died" in caught.value.message


def test_tool_call_tokens_are_counted_apart_and_after_reconciliation() -> None:
    state = StreamState(
        ProbeResult(api="chat", max_tokens=6), FORMATS["chat"], TokenCounter(), keep_text=True
    )
    call = {"index": 0, "function": {"arguments": '{"q":"'}}
    state.on_events(0.1, [SseEvent(json.dumps({"choices": [{"delta": {"tool_calls": [call]}}]}))])
    state.on_events(0.2, [SseEvent(json.dumps({"choices": [{"delta": {"content": " hi"}}]}))])
    usage = {"choices": [], "usage": {"completion_tokens": 6, "prompt_tokens": 3}}
    state.on_events(0.3, [SseEvent(json.dumps(usage)), SseEvent("[DONE]")])
    state.finish(exact_length=False)
    result = state.result
    assert result.output_tokens == 6 and result.tool_call_tokens == 3 and result.text_tokens == 3
    assert result.output_text == '{"q":" hi'


# -- live, against the simulator ------------------------------------------------------------------


async def _send(sim: SimServer, api: str, spec: RequestSpec, **overrides: Any) -> ProbeResult:
    async with ProbeClient(settings_for(sim, api=api, **overrides)) as client:
        return await client.send(spec)


async def test_responses_api_live(sim: SimServer) -> None:
    result = await _send(sim, "responses", RequestSpec(prompt="hello there", max_tokens=12, keep_text=True))
    assert result.outcome is Outcome.OK, result.error
    assert result.output_tokens == result.completion_tokens_reported == 12
    assert result.finish_reason == "length" and result.token_source is TokenSource.CHUNKS
    assert result.output_text is not None and len(result.output_text) == 4 * 12  # " xyz" per token
    assert result.prompt_tokens_reported is not None and result.tool_call_tokens == 0


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_tool_call_streams_live(sim: SimServer, api: str) -> None:
    spec = RequestSpec(prompt="look it up", max_tokens=10, tool_calls=True, keep_text=True)
    result = await _send(sim, api, spec)
    assert result.outcome is Outcome.OK, result.error
    assert result.output_tokens == result.tool_call_tokens == 10 and result.text_tokens == 0
    assert set(json.loads(result.output_text or "")) == {"query"}  # the streamed arguments are JSON
    assert len(result.token_times) == 10  # every argument chunk timed, the opening delta not


def test_tool_call_bodies_name_one_tool() -> None:
    settings = TargetSettings(base_url="http://x")
    spec = RequestSpec(prompt="q", max_tokens=5, tool_calls=True)
    chat = FORMATS["chat"].build_body(settings, spec, "m")
    assert chat["tool_choice"] == {"type": "function", "function": {"name": TOOL_NAME}}
    assert chat["tools"][0]["function"]["name"] == TOOL_NAME
    assert "ignore_eos" not in chat and "min_tokens" not in chat  # a call ends where its JSON does
    responses = FORMATS["responses"].build_body(settings, spec, "m")
    assert responses["tool_choice"] == {"type": "function", "name": TOOL_NAME}
    assert responses["input"] == [{"role": "user", "content": "q"}] and responses["max_output_tokens"] == 5
    assert "stream_options" not in responses


# mode -> (fault, outcome, tokens before it, words in the error)
RESPONSES_FAULTS: dict[str, tuple[Any, Outcome, int, str]] = {
    "reset": ({"mode": "reset", "at": 6}, Outcome.STREAM_ABORTED, 3, ""),  # 3 opening events + 3 deltas
    "error_event": ({"mode": "error_event", "at": 5}, Outcome.STREAM_ABORTED, 2, "simulated failure"),
    "no_end": ("no_end", Outcome.STREAM_ABORTED, 6, "before response.completed"),
    "http_503": ("http_503", Outcome.HTTP_STATUS, 0, "HTTP 503"),
}


@pytest.mark.parametrize("mode", sorted(RESPONSES_FAULTS))
async def test_responses_event_stream_faults(sim: SimServer, mode: str) -> None:
    spec_fault, outcome, tokens, words = RESPONSES_FAULTS[mode]
    spec = RequestSpec(prompt="hi", max_tokens=6, extra_body=fault(spec_fault))
    async with ProbeClient(settings_for(sim, api="responses", timeouts=FAST)) as client:
        failed = await client.send(spec)
        after = await client.send(RequestSpec(prompt="hi", max_tokens=6))
    assert failed.outcome is outcome, failed.error
    assert len(failed.token_times) == tokens
    assert words in (failed.error or "")
    assert after.outcome is Outcome.OK and after.output_tokens == 6


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_repeated_conversation_reports_cached_prompt_tokens(sim: SimServer, api: str) -> None:
    words = " ".join(f"w{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(200))
    spec = RequestSpec(prompt=words, max_tokens=4)
    first = await _send(sim, api, spec)
    second = await _send(sim, api, spec)
    assert first.prompt_tokens_cached == 0
    assert second.prompt_tokens_cached is not None and second.prompt_tokens_reported is not None
    block = sim.resolved.engine.block_size
    assert second.prompt_tokens_cached == (second.prompt_tokens_reported // block) * block
    labels = {"model_name": sim.model, "engine": "0"}
    assert (
        sim.registry.get_sample_value("vllm:prefix_cache_hits_total", labels) == second.prompt_tokens_cached
    )
    queries = sim.registry.get_sample_value("vllm:prefix_cache_queries_total", labels)
    assert queries == 2 * second.prompt_tokens_reported
