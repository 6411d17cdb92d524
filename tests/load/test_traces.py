"""Trace loaders on small files: the four formats, replay and workloads, and bad files with the exact
message naming file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from exporter.load.presets import preset
from exporter.load.traces import trace_arrivals, trace_specs, trace_workload
from exporter.settings.trace_files import (
    TraceRequest,
    estimate_tokens,
    load_azure,
    load_jsonl,
    load_mooncake,
    load_sharegpt,
    load_trace,
)
from exporter.sim import tokenizer


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_mooncake(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "m.jsonl",
        '{"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1]}\n\n'
        '{"timestamp": 3052, "input_length": 2287, "output_length": 316, "hash_ids": [0, 42]}\n',
    )
    assert load_mooncake(path) == [
        TraceRequest(6755, 500, 0.0, hash_ids=(0, 1)),
        TraceRequest(2287, 316, 3.052, hash_ids=(0, 42)),
    ]


def test_azure_with_dates_and_seconds(tmp_path: Path) -> None:
    dated = _write(
        tmp_path,
        "a.csv",
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n",
    )
    records = load_azure(dated)
    assert [(r.prompt_tokens, r.output_tokens) for r in records] == [(374, 44), (396, 109)]
    assert records[1].timestamp is not None and records[0].timestamp is not None
    assert records[1].timestamp - records[0].timestamp == pytest.approx(4.314579, abs=1e-6)
    numeric = _write(tmp_path, "b.csv", "timestamp,contexttokens,generatedtokens\n0.5,10,2\n1.5,20,3\n")
    assert load_azure(numeric) == [TraceRequest(10, 2, 0.5), TraceRequest(20, 3, 1.5)]


def test_generic_jsonl(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "g.jsonl",
        '{"prompt_tokens": 100, "output_tokens": 20, "timestamp": 1.5}\n'
        '{"prompt": "abcdefgh", "output_tokens": 5}\n'
        '{"prompt": "abcd", "prompt_tokens": 9, "output_tokens": 5}\n',
    )
    assert load_jsonl(path) == [
        TraceRequest(100, 20, 1.5),
        TraceRequest(2, 5, None, "abcdefgh"),
        TraceRequest(9, 5, None, "abcd"),
    ]
    counted = load_jsonl(path, count_tokens=lambda text: len(tokenizer.encode(text)))
    assert counted[1].prompt_tokens == len(tokenizer.encode("abcdefgh"))


def test_sharegpt(tmp_path: Path) -> None:
    data = [
        {"id": "a", "conversations": [{"from": "human", "value": "x" * 40},
                                      {"from": "gpt", "value": "y" * 400}]},
        {"id": "b", "conversations": [{"from": "human", "value": "only a question"}]},
        {"id": "c", "conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "hi"},
                                      {"from": "gpt", "value": "hello there"}]},
    ]  # fmt: skip
    records = load_sharegpt(_write(tmp_path, "s.json", json.dumps(data)))
    assert records == [TraceRequest(10, 100, prompt="x" * 40), TraceRequest(1, 3, prompt="hi")]
    assert estimate_tokens("") == 1


def test_load_trace_dispatch_and_unknown_format(tmp_path: Path) -> None:
    path = _write(tmp_path, "g.jsonl", '{"prompt_tokens": 1, "output_tokens": 1}\n')
    assert load_trace(path, "JSONL") == [TraceRequest(1, 1)]
    with pytest.raises(ValueError) as caught:
        load_trace(path, "csv")
    assert str(caught.value) == 'unknown trace format "csv"; valid: azure, jsonl, mooncake, sharegpt'


BAD = [
    ("mooncake", "m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
     '{"timestamp": 1, "input_length": 5}\n', '{path}:2: missing field "output_length"'),
    ("mooncake", "m.jsonl", '{"timestamp": 0, "input_length": "many", "output_length": 1}\n',
     "{path}:1: field \"input_length\" must be an integer >= 0, got 'many'"),
    ("mooncake", "m.jsonl", '{"timestamp": 0, "input_length": 5.5, "output_length": 1}\n',
     '{path}:1: field "input_length" must be an integer >= 0, got 5.5'),
    ("mooncake", "m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": -1}\n',
     '{path}:1: field "output_length" must be an integer >= 0, got -1'),
    ("mooncake", "m.jsonl", '{"timestamp": "noon", "input_length": 5, "output_length": 1}\n',
     "{path}:1: field \"timestamp\" must be a finite number, got 'noon'"),
    ("mooncake", "m.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": "x"}\n',
     "{path}:1: field \"hash_ids\" must be a list of integers, got 'x'"),
    ("mooncake", "m.jsonl", '{"timestamp": 0,\n',
     "{path}:1: not valid JSON (Expecting property name enclosed in double quotes at column 17)"),
    ("mooncake", "m.jsonl", "[1, 2]\n", "{path}:1: expected a JSON object, got list"),
    ("mooncake", "m.jsonl", "\n\n", "{path}: the trace holds no usable request"),
    ("jsonl", "g.jsonl", '{"output_tokens": 3}\n', '{path}:1: missing field "prompt" or "prompt_tokens"'),
    ("jsonl", "g.jsonl", '{"prompt": 3, "output_tokens": 3}\n',
     '{path}:1: field "prompt" must be a string, got int'),
    ("jsonl", "g.jsonl", '{"prompt_tokens": true, "output_tokens": 3}\n',
     '{path}:1: field "prompt_tokens" must be an integer >= 0, got True'),
    ("azure", "a.csv", "TIMESTAMP,ContextTokens\n1,2\n",
     '{path}:1: missing column "GeneratedTokens"; found: TIMESTAMP, ContextTokens'),
    ("azure", "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n2,x,3\n",
     "{path}:3: field \"ContextTokens\" must be an integer >= 0, got 'x'"),
    ("azure", "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n1,2\n",
     '{path}:2: missing field "GeneratedTokens"'),
    ("azure", "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,2,3\n",
     "{path}:2: field \"TIMESTAMP\" must be a date-time (2023-11-16 18:15:46.68) or seconds, "
     "got 'yesterday'"),
    ("azure", "a.csv", "", '{path}:1: missing column "TIMESTAMP"; found: nothing'),
    ("sharegpt", "s.json", '{"conversations": []}',
     "{path}: expected a JSON list of conversations, got dict"),
    ("sharegpt", "s.json", '[{"id": 1}]', '{path}: entry 0: missing field "conversations"'),
    ("sharegpt", "s.json", '[{"conversations": "hi"}]',
     '{path}: entry 0: field "conversations" must be a list of turns, got str'),
    ("sharegpt", "s.json", '[{"conversations": []}, {"conversations": [{"from": "human"}]}]',
     '{path}: entry 1: field "conversations[0]" must be an object with a string "value"'),
    ("sharegpt", "s.json", '[\n{"conversations": [}\n]',
     "{path}:2: not valid JSON (Expecting value at column 20)"),
]  # fmt: skip


@pytest.mark.parametrize(("fmt", "name", "text", "message"), BAD)
def test_bad_files_name_file_line_and_field(
    tmp_path: Path, fmt: str, name: str, text: str, message: str
) -> None:
    path = _write(tmp_path, name, text)
    with pytest.raises(ValueError) as caught:
        load_trace(path, fmt)
    assert str(caught.value) == message.format(path=path)


def test_unreadable_and_non_utf8_files(tmp_path: Path) -> None:
    with pytest.raises(
        ValueError, match=r"cannot read trace file .*missing.jsonl: No such file or directory"
    ):
        load_jsonl(tmp_path / "missing.jsonl")
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"prompt": "caf\xe9"}\n')
    with pytest.raises(ValueError) as caught:
        load_jsonl(path)
    assert str(caught.value) == f"{path}: not UTF-8 text (invalid continuation byte at byte 15)"


def test_replay_specs_and_workload_from_a_trace() -> None:
    records = [
        TraceRequest(50, 4, 10.0),
        TraceRequest(30, 2, 10.5, prompt="hello world"),
        TraceRequest(70, 9, 12.0),
    ]
    arrivals = trace_arrivals(records, time_scale=2.0)
    assert arrivals.offsets(3, np.random.default_rng(0)).tolist() == [0.0, 1.0, 4.0]
    workload = preset("sharegpt", api="completions")
    specs = trace_specs(records, workload)
    assert [(s.prompt_tokens, s.max_tokens) for s in specs] == [(50, 4), (30, 2), (70, 9)]
    assert len(tokenizer.encode(specs[0].prompt)) == 50
    assert specs[1].prompt == "hello world" and specs[1].messages is None
    chat_specs = trace_specs(records, preset("sharegpt"))
    assert chat_specs[1].messages == (("user", "hello world"),)
    sampled = trace_workload(records, workload).sample_lengths(200, np.random.default_rng(0))
    assert {(int(p), int(o)) for p, o in zip(*sampled, strict=True)} == {(50, 4), (30, 2), (70, 9)}
    with pytest.raises(ValueError) as caught:
        trace_arrivals([TraceRequest(1, 1, 0.0), TraceRequest(1, 1)])
    assert str(caught.value) == (
        "trace replay: request 1 has no timestamp (1 without); every request needs one: "
        'jsonl "timestamp" (seconds), mooncake "timestamp" (ms), azure TIMESTAMP; sharegpt has none'
    )
