"""``ObservedStream``: an exchange's stamped messages to the probe's record, by the probe's decoder."""

from __future__ import annotations

import json

import pytest

from exporter.streams.result import Outcome, TokenSource, intervals
from exporter.traffic.record import Ignored, ObservedStream, StreamLimits, listed_models, request_facts

CHAT = [(":method", b"POST"), (":path", b"/v1/chat/completions")]
SSE = [(":status", b"200"), ("content-type", b"text/event-stream; charset=utf-8")]
BODY = json.dumps({"model": "m", "stream": True, "max_tokens": 3, "messages": []}).encode()


def chunk(text: str = "", *, role: bool = False, usage: int | None = None) -> bytes:
    delta = {"role": "assistant"} if role else {"content": text}
    obj: dict[str, object] = {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
    if usage is not None:
        obj = {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": usage}}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def started(limits: StreamLimits | None = None, body: bytes = BODY) -> ObservedStream:
    stream = ObservedStream(limits or StreamLimits(), frozenset({"m"}))
    stream.on_request_headers(0.0, CHAT, False)
    stream.on_request_body(1.0, body, True)
    stream.on_response_headers(1.5, SSE, False)
    return stream


def test_a_chat_stream_is_timed_at_each_chunk_s_own_stamp() -> None:
    stream = started()
    stream.on_response_body(1.6, chunk(role=True), False)  # role-only: no token
    stream.on_response_body(2.0, chunk("a"), False)
    stream.on_response_body(2.5, chunk("b") + chunk("c"), False)  # two tokens in one chunk
    stream.on_response_body(3.0, chunk(usage=3) + b"data: [DONE]\n\n", True)
    record = stream.finish(3.1)
    assert record is not None and record.model == "m"
    result = record.result
    assert result.outcome is Outcome.OK, result.error
    assert result.api == "chat" and result.sent_at == 1.0 and result.headers_at == 1.5
    assert result.token_times == [2.0, 2.5, 2.5]
    assert intervals(result) == pytest.approx([1.0, 0.5, 0.0])
    assert (result.prompt_tokens_reported, result.completion_tokens_reported) == (7, 3)
    assert result.token_source is TokenSource.CHUNKS and result.finished_at == 3.0


def test_chunks_split_anywhere_decode_the_same() -> None:
    stream = started()
    wire = chunk("a") + chunk("b") + b"data: [DONE]\n\n"
    for i, byte in enumerate(wire):  # one byte per message: the SSE decoder is incremental
        stream.on_response_body(2.0 + i / 1000, bytes([byte]), i == len(wire) - 1)
    record = stream.finish(9.0)
    assert record is not None and record.result.outcome is Outcome.OK
    assert len(record.result.token_times) == 2


def test_a_model_outside_the_list_is_other() -> None:
    body = json.dumps({"model": "secret-finetune-of-user-42", "stream": True}).encode()
    stream = started(body=body)
    stream.on_response_body(2.0, chunk("a") + b"data: [DONE]\n\n", True)
    record = stream.finish(3.0)
    assert record is not None and record.model == "other"


@pytest.mark.parametrize(
    ("headers", "body", "reason"),
    [
        ([(":method", b"GET"), (":path", b"/v1/models")], None, Ignored.NOT_LLM),
        ([(":method", b"POST"), (":path", b"/v1/embeddings")], BODY, Ignored.NOT_LLM),
        (CHAT, json.dumps({"model": "m", "messages": []}).encode(), Ignored.NOT_STREAMING),
        (CHAT, b"not json", Ignored.NOT_STREAMING),
    ],
)
def test_other_exchanges_are_counted_apart(
    headers: list[tuple[str, bytes]], body: bytes | None, reason: Ignored
) -> None:
    stream = ObservedStream(StreamLimits(), frozenset())
    stream.on_request_headers(0.0, headers, body is None)
    if body is not None:
        stream.on_request_body(1.0, body, True)
    assert stream.finish(2.0) is None
    assert stream.ignored is reason


@pytest.mark.parametrize(
    ("status", "outcome"), [(b"429", Outcome.RATE_LIMITED), (b"500", Outcome.HTTP_STATUS)]
)
def test_an_error_status_is_the_request_s_failure(status: bytes, outcome: Outcome) -> None:
    stream = started()
    stream.on_response_headers(1.5, [(":status", status), ("content-type", b"application/json")], False)
    stream.on_response_body(1.6, b'{"error": "busy"}', True)
    record = stream.finish(2.0)
    assert record is not None and record.result.outcome is outcome
    assert record.result.http_status == int(status)


def test_a_probe_s_stream_is_recorded_with_its_id() -> None:
    stream = ObservedStream(StreamLimits(), frozenset({"m"}))
    stream.on_request_headers(0.0, [*CHAT, ("x-fluidity-probe", b"a1b2-7")], False)
    stream.on_request_body(1.0, BODY, True)
    stream.on_response_headers(1.5, SSE, False)
    stream.on_response_body(2.0, chunk("a") + b"data: [DONE]\n\n", True)
    record = stream.finish(3.0)
    assert record is not None and record.probe_id == "a1b2-7"
    assert record.result.token_times == [2.0] and record.request_bytes == len(BODY)


def test_a_user_s_failure_keeps_no_text_of_the_stream() -> None:
    stream = started()
    stream.on_response_body(2.0, b'data: {"error": {"message": "your prompt: tell me a secret"}}\n\n', True)
    record = stream.finish(3.0)
    assert record is not None and record.result.outcome is Outcome.STREAM_ABORTED
    assert record.result.error is None and record.probe_id is None


def test_the_observer_s_late_loop_flags_the_record() -> None:
    stream = started()
    stream.on_response_body(2.0, chunk("a") + b"data: [DONE]\n\n", True)
    record = stream.finish(3.0, lag=(0.05, 0.5))  # a 50 ms stall while the stream was open
    assert record is not None and record.result.unreliable
    calm = started()
    calm.on_response_body(2.0, chunk("a") + b"data: [DONE]\n\n", True)
    kept = calm.finish(3.0, lag=(0.001, 0.0))
    assert kept is not None and not kept.result.unreliable


def test_a_stream_cut_before_done_is_aborted() -> None:
    stream = started()
    stream.on_response_body(2.0, chunk("a"), False)
    record = stream.finish(5.0)  # the gRPC stream ended without the body's end
    assert record is not None and record.result.outcome is Outcome.STREAM_ABORTED
    assert record.result.finished_at == 5.0


def test_bad_bytes_are_a_malformed_stream() -> None:
    stream = started()
    stream.on_response_body(2.0, b"data: {not json\n\n", True)
    record = stream.finish(3.0)
    assert record is not None and record.result.outcome is Outcome.MALFORMED_STREAM


def test_a_stream_past_its_bytes_is_given_up_and_counted() -> None:
    stream = started(StreamLimits(response_bytes=1000))
    for i in range(100):
        stream.on_response_body(2.0 + i, chunk("abc"), False)
    assert stream.finish(200.0) is None
    assert stream.ignored is Ignored.TOO_LARGE


def test_a_stream_past_its_token_events_is_given_up() -> None:
    stream = started(StreamLimits(token_events=10))
    stream.on_response_body(2.0, chunk("a") * 11, False)
    stream.on_response_body(3.0, b"data: [DONE]\n\n", True)
    assert stream.finish(4.0) is None
    assert stream.ignored is Ignored.TOO_LARGE


def test_an_oversized_request_body_is_not_read() -> None:
    big = json.dumps({"model": "m", "stream": True, "messages": [{"content": "x" * 5000}]}).encode()
    stream = ObservedStream(StreamLimits(request_body_bytes=1000), frozenset({"m"}))
    stream.on_request_headers(0.0, CHAT, False)
    for i in range(0, len(big), 500):
        stream.on_request_body(1.0, big[i : i + 500], i + 500 >= len(big))
    assert stream.ignored is Ignored.NOT_STREAMING  # its "stream": true was never read


@pytest.mark.parametrize(
    ("body", "limit"),
    [
        ({"max_tokens": 5}, 5),
        ({"max_completion_tokens": 6}, 6),
        ({"max_output_tokens": 7}, 7),
        ({"max_tokens": True}, None),
    ],
)
def test_request_facts_read_the_token_limit_of_each_api(body: dict[str, object], limit: int | None) -> None:
    assert request_facts(json.dumps({"stream": True, **body}).encode()).max_tokens == limit


def test_the_engine_s_model_list_is_read_as_it_passes() -> None:
    stream = ObservedStream(StreamLimits(), frozenset())
    stream.on_request_headers(0.0, [(":method", b"GET"), (":path", b"/v1/models")], True)
    stream.on_response_headers(1.0, [(":status", b"200")], False)
    answer = json.dumps({"object": "list", "data": [{"id": "llama-3"}, {"id": "qwen"}, {"id": 7}]}).encode()
    stream.on_response_body(1.1, answer[:10], False)
    stream.on_response_body(1.2, answer[10:], True)
    assert stream.finish(2.0) is None and stream.ignored is Ignored.NOT_LLM
    assert stream.models_listed == ("llama-3", "qwen")


@pytest.mark.parametrize("body", [b"", b"not json", b'{"data": "x"}', b"[1, 2]"])
def test_anything_else_lists_no_model(body: bytes) -> None:
    assert listed_models(body) == ()


def test_a_model_list_past_its_bound_is_not_read() -> None:
    stream = ObservedStream(StreamLimits(models_body_bytes=100), frozenset())
    stream.on_request_headers(0.0, [(":method", b"GET"), (":path", b"/v1/models")], True)
    stream.on_response_headers(1.0, [(":status", b"200")], False)
    stream.on_response_body(1.1, json.dumps({"data": [{"id": "m" * 200}]}).encode(), True)
    assert stream.finish(2.0) is None and stream.models_listed == ()
