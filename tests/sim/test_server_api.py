"""The OpenAI-compatible API over real sockets: chunk shapes, usage, token ids, errors."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from exporter.sim import SimServer, tokenizer
from tests.sim.sim_helpers import completion_body, stream
from tests.support.sim import StartSim
from tests.support.wait import wait_for

COMPLETION_CHUNK_KEYS = {"id", "object", "created", "model", "choices"}


def assert_completion_chunk(chunk: dict[str, Any]) -> None:
    assert set(chunk) >= COMPLETION_CHUNK_KEYS
    assert chunk["object"] == "text_completion" and chunk["id"].startswith("cmpl-")
    assert isinstance(chunk["created"], int) and chunk["model"] == "sim-tiny"
    if chunk["choices"]:
        (choice,) = chunk["choices"]
        assert choice["index"] == 0 and isinstance(choice["text"], str)
        assert choice["finish_reason"] in (None, "length", "stop")


async def test_streaming_completion_chunks_parse_as_openai(
    sim: SimServer, session: aiohttp.ClientSession
) -> None:
    result = await stream(session, sim.url + "/v1/completions", completion_body(max_tokens=12))
    assert result.status == 200 and result.content_type.startswith("text/event-stream")
    assert result.events[-1][1] == "[DONE]"
    chunks = result.chunks
    for chunk in chunks:
        assert_completion_chunk(chunk)
    texts = [c["choices"][0]["text"] for c in chunks]
    assert len(texts) == 12 and all(texts)
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 11 + ["length"]
    assert len({c["id"] for c in chunks}) == 1


async def test_chat_stream_opens_with_role_only_delta_and_reports_usage(
    sim: SimServer, session: aiohttp.ClientSession
) -> None:
    messages = [{"role": "user", "content": "count to ten please"}]
    body = {
        "model": "sim-tiny",
        "messages": messages,
        "max_completion_tokens": 7,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    result = await stream(session, sim.url + "/v1/chat/completions", body)
    chunks = result.chunks
    assert chunks[0]["object"] == "chat.completion.chunk"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    content = [c for c in chunks[1:] if c["choices"]]
    assert len(content) == 7 and all(c["choices"][0]["delta"]["content"] for c in content)
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == []
    prompt_tokens = tokenizer.count_chat_tokens(messages)
    assert usage_chunk["usage"] == {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 7,
        "total_tokens": prompt_tokens + 7,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert all("usage" not in c for c in chunks[:-1])  # no continuous usage unless asked


async def test_usage_counts_match_the_tokenizer(sim: SimServer, session: aiohttp.ClientSession) -> None:
    prompt = tokenizer.prompt_of_length(123)
    body = {"model": "sim-tiny", "prompt": prompt, "max_tokens": 9}
    async with session.post(sim.url + "/v1/completions", json=body) as resp:
        data = await resp.json()
    assert resp.status == 200
    assert data["usage"] == {
        "prompt_tokens": 123,
        "completion_tokens": 9,
        "total_tokens": 132,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    text = data["choices"][0]["text"]
    assert len(tokenizer.encode(text)) == 9 and data["choices"][0]["finish_reason"] == "length"


async def test_token_ids_and_continuous_usage_on_every_chunk(
    sim: SimServer, session: aiohttp.ClientSession
) -> None:
    body = completion_body(
        prompt=[5, 300, 301],
        max_tokens=6,
        return_token_ids=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
    )
    chunks = (await stream(session, sim.url + "/v1/completions", body)).chunks
    content = [c for c in chunks if c["choices"]]
    assert content[0]["choices"][0]["prompt_token_ids"] == [5, 300, 301]
    for done, chunk in enumerate(content, start=1):
        choice = chunk["choices"][0]
        assert tokenizer.decode(choice["token_ids"]) == choice["text"]
        assert chunk["usage"] == {
            "prompt_tokens": 3,
            "completion_tokens": done,
            "total_tokens": 3 + done,
            "prompt_tokens_details": {"cached_tokens": 0},
        }
    assert chunks[-1]["usage"]["completion_tokens"] == 6


async def test_seed_makes_text_reproducible(sim: SimServer, session: aiohttp.ClientSession) -> None:
    texts = []
    for _ in range(2):
        async with session.post(
            sim.url + "/v1/completions", json={**completion_body(), "stream": False, "seed": 7}
        ) as r:
            texts.append((await r.json())["choices"][0]["text"])
    assert texts[0] == texts[1]


async def test_non_streaming_chat(sim: SimServer, session: aiohttp.ClientSession) -> None:
    body = {"model": "sim-tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    async with session.post(sim.url + "/v1/chat/completions", json=body) as resp:
        data = await resp.json()
    assert data["object"] == "chat.completion"
    message = data["choices"][0]["message"]
    assert message["role"] == "assistant" and len(tokenizer.encode(message["content"])) == 4


async def test_models_and_health(sim: SimServer, session: aiohttp.ClientSession) -> None:
    async with session.get(sim.url + "/v1/models") as resp:
        models = await resp.json()
    assert [m["id"] for m in models["data"]] == ["sim-tiny"]
    async with session.get(sim.url + "/health") as resp:
        assert resp.status == 200


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "sim-tiny", "prompt": "x", "max_tokens": 0}, "max_tokens"),
        ({"model": "sim-tiny", "prompt": "x", "max_tokens": "5"}, "max_tokens"),
        ({"model": "sim-tiny", "prompt": 5}, "prompt"),
        ({"prompt": "x"}, "model"),
        ({"model": "sim-tiny", "prompt": "x", "temperature": 3}, "temperature"),
        ({"model": "sim-tiny", "prompt": "x", "stream_options": {"include_usage": True}}, "stream_options"),
        ({"model": "sim-tiny", "prompt": "x", "max_tokens": 2, "min_tokens": 3}, "min_tokens"),
        ({"model": "sim-tiny", "prompt": "x", "max_tokens": 9000}, "max_tokens"),
        ({"model": "sim-tiny", "prompt": "x", "sim": {"fault": "nope"}}, "sim.fault"),
        ({"model": "sim-tiny", "prompt": "x", "sim": {"script": {"gaps": [-1]}}}, "sim.script.gaps"),
    ],
)
async def test_bad_fields_give_400_naming_the_field(
    sim: SimServer, session: aiohttp.ClientSession, body: dict[str, Any], param: str
) -> None:
    async with session.post(sim.url + "/v1/completions", json=body) as resp:
        data = await resp.json()
    assert resp.status == 400
    assert set(data["error"]) == {"message", "type", "param", "code"}
    assert data["error"]["param"] == param and data["error"]["type"] == "invalid_request_error"


async def test_bad_json_and_bad_messages_give_400(sim: SimServer, session: aiohttp.ClientSession) -> None:
    async with session.post(sim.url + "/v1/completions", data=b"{nope") as resp:
        assert resp.status == 400 and "not valid JSON" in (await resp.json())["error"]["message"]
    async with session.post(
        sim.url + "/v1/chat/completions", json={"model": "sim-tiny", "messages": []}
    ) as resp:
        assert resp.status == 400 and (await resp.json())["error"]["param"] == "messages"


async def test_unknown_model_gives_404(sim: SimServer, session: aiohttp.ClientSession) -> None:
    async with session.post(sim.url + "/v1/completions", json={"model": "gpt-9", "prompt": "x"}) as resp:
        data = await resp.json()
    assert (
        resp.status == 404
        and data["error"]["code"] == "model_not_found"
        and "gpt-9" in data["error"]["message"]
    )


async def test_full_queue_gives_429(start_sim: StartSim, session: aiohttp.ClientSession) -> None:
    server = await start_sim(max_num_seqs=1, max_waiting=1)
    long_body = {"model": "sim-tiny", "prompt": "x", "max_tokens": 200}
    running = asyncio.ensure_future(session.post(server.url + "/v1/completions", json=long_body))
    await wait_for(lambda: len(server.engine.running) == 1, timeout=5, what="the first request to run")
    queued = asyncio.ensure_future(session.post(server.url + "/v1/completions", json=long_body))
    await wait_for(lambda: len(server.engine.waiting) == 1, timeout=5, what="the second to fill the queue")
    async with session.post(server.url + "/v1/completions", json=long_body) as resp:
        data = await resp.json()
    assert resp.status == 429 and data["error"]["code"] == "queue_full"
    for task in (running, queued):
        (await task).release()


async def test_client_disconnect_aborts_the_request_and_frees_the_engine(sim: SimServer) -> None:
    assert sim.address is not None
    reader, writer = await asyncio.open_connection(*sim.address)
    body = json.dumps(completion_body(max_tokens=2000)).encode()
    writer.write(
        b"POST /v1/completions HTTP/1.1\r\nHost: sim\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    )
    assert b"data: " in await reader.readuntil(b"\n\n")
    writer.close()
    await wait_for(lambda: not sim.engine.running, timeout=1, what="the engine to drop the request")
    assert not sim.engine.running and sim.engine.kv_usage == 0
    assert sim.stats.success["abort"] == 1


async def test_http_1_0_client_gets_an_unchunked_stream(sim: SimServer) -> None:
    assert sim.address is not None
    reader, writer = await asyncio.open_connection(*sim.address)
    body = json.dumps(completion_body(max_tokens=3)).encode()
    writer.write(b"POST /v1/completions HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    response = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, payload = response.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding" not in head
    events = [e for e in payload.split(b"\n\n") if e]
    assert all(e.startswith(b"data: ") for e in events) and events[-1] == b"data: [DONE]"
    assert len(events) == 4


async def test_speculative_decoding_sends_several_tokens_per_chunk(
    start_sim: StartSim, session: aiohttp.ClientSession
) -> None:
    server = await start_sim(spec_k=3, spec_acceptance=0.9)
    chunks = (await stream(session, server.url + "/v1/completions", completion_body(max_tokens=40))).chunks
    sizes = [len(c["choices"][0]["text"]) // 4 for c in chunks]
    assert sum(sizes) == 40 and max(sizes) == 4 and len(sizes) < 30
