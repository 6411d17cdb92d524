"""A stream whose chunks differ from its first in their text alone is read with no JSON decoded for
them (``chunk_shapes.plain_template``, keep mode in ``_reads.c``), and it must end exactly as a stream
decoded chunk by chunk: the same stamps, counts and text, with the C reads and with the Python ones
(which decode every chunk), also where chunks do not fit the template (escaped text, a changed field).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web

from exporter.probe import stream_reader
from exporter.probe.client import ProbeClient
from exporter.settings.target import TargetSettings
from exporter.streams.request import RequestSpec, Timeouts
from exporter.streams.result import Outcome
from tests.support.net import serving_app

pytestmark = pytest.mark.usefixtures("both_reads")  # the stamped sockets read in C and in Python

# A text that needs no escape fits the template; one that does ("\n", a quote) is decoded, and so is
# every chunk after the server changes another field (llama.cpp writes the time into each chunk), until
# the reader learns the new shape from the first plain one.
TEXTS = [" Hello", ",", " w\u00f6rld", "\n", ' "quoted"', " again", " and", " more", "!"]
CHANGED_AT = 6  # from this chunk on, "created" is a second later
GAP_S = 0.01  # each chunk its own read (the reads keep only whole one-event chunks)
FITS_BEFORE_CHANGE = 3  # of the chunks before it, those the first one's template reads (not "\n", a quote)


def chunk(text: str, created: int) -> bytes:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": None, "stop_reason": None}
    body = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": created,
        "model": "m",
        "choices": [choice],
    }
    return b"data: " + json.dumps(body, ensure_ascii=False).encode() + b"\n\n"


async def serve(request: web.Request) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for index, text in enumerate(TEXTS * 3):
        await resp.write(chunk(text, 1700000000 + (index >= CHANGED_AT)))
        await asyncio.sleep(GAP_S)
    usage = {"completion_tokens": len(TEXTS) * 3, "prompt_tokens": 2}
    end = {"id": "cmpl-1", "choices": [{"index": 0, "text": "", "finish_reason": "length"}], "usage": usage}
    await resp.write(b"data: " + json.dumps(end).encode() + b"\n\ndata: [DONE]\n\n")
    return resp


async def test_a_stream_read_by_its_template_ends_as_one_decoded_chunk_by_chunk(
    both_reads: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    read_as_texts: list[int] = []  # how many chunks each decoded batch held as the template's texts
    flush = stream_reader.StreamReader._flush

    def counted(self: stream_reader.StreamReader) -> None:
        read_as_texts.append(sum(len(item) == 2 and isinstance(item[1], str) for item in self._kept or ()))
        flush(self)

    monkeypatch.setattr(stream_reader.StreamReader, "_flush", counted)
    monkeypatch.setattr(
        stream_reader, "BATCH_READS", 4
    )  # decoded often: a changed shape is learned mid-stream
    app = web.Application()
    app.router.add_post("/v1/completions", serve)
    async with serving_app(app, access_log=None) as url:
        settings = TargetSettings(
            base_url=url, api="completions", model="m", timeouts=Timeouts(connect=2, ttft=5, idle=5, total=20)
        )
        async with ProbeClient(settings) as client:
            result = await client.send(RequestSpec(prompt="hi", max_tokens=len(TEXTS) * 3, keep_text=True))
    assert result.outcome is Outcome.OK, result.error
    assert result.output_text == "".join(TEXTS * 3)
    assert sum(result.token_counts) == len(TEXTS) * 3 == result.completion_tokens_reported
    assert len(result.token_times) == len(TEXTS) * 3
    assert result.token_times == sorted(result.token_times)
    if both_reads == "native":  # templates read the chunks after the change too: the new one was learned
        assert sum(read_as_texts) > FITS_BEFORE_CHANGE, read_as_texts
    else:
        assert sum(read_as_texts) == 0  # the Python reads keep texts never: every chunk decoded


def test_the_served_chunks_fit_and_miss_the_template_where_this_test_says(
    both_reads: str,
) -> None:
    """The stream above is what it claims: its plain chunks' templates differ where "created" changes,
    and the escaped texts have none."""
    from exporter.streams.chunk_shapes import plain_template

    def template(index: int) -> Any:
        text = TEXTS[index % len(TEXTS)]
        data = chunk(text, 1700000000 + (index >= CHANGED_AT))[6:-2]
        return plain_template("/v1/completions", data, text)

    assert template(0) is not None and template(0) != template(CHANGED_AT + 1) is not None
    assert template(3) is None and template(4) is None  # "\n" and a quote
