"""Multi-turn sessions and the Responses API against the real engines.

Each follow-up re-sends the conversation with the earlier answers as they were streamed, so the
engine's prefix cache serves what it has seen: llama.cpp reports the tokens it reused per request
(``timings.cache_n``) and in ``llamacpp:prompt_tokens_cached_total``; vLLM counts them in
``vllm:prefix_cache_hits_total`` (whole 128-token blocks; its usage lists no cached tokens unless the
server runs with ``--enable-prompt-tokens-details``). vLLM's CPU build serves ``/v1/responses``, and
ends an answer cut at ``max_output_tokens`` with a ``response.completed`` event whose status is
``incomplete``. Tool calls are not tested here: vLLM refuses a named ``tool_choice`` without a
``--tool-call-parser``, and the random-weight model's chat template knows no tools.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from exporter.cli import main
from scripts.real_engines.server import EngineServer
from tests.real_engine import REAL_ENGINE
from tests.real_engine.checks import engine_samples
from tests.support.measured import assert_measured

pytestmark = REAL_ENGINE

SESSIONS = 3
TURNS = 3
PROMPT = 200  # the first turn's prompt; each follow-up adds a 40-token message
OUTPUT = 16
VLLM_BLOCK = 128  # vLLM's default KV block on this build (cache_config_info block_size)


def _bench(base_url: str, out: Path, *flags: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    args = ["bench", "--url", base_url, "--requests", str(SESSIONS * TURNS), "--rate", "2"]
    args += ["--prompt-tokens", f"fixed:{PROMPT}", "--output-tokens", f"fixed:{OUTPUT}", *flags]
    # No calibration requests: the engine's cache counter must hold the measured load alone (the
    # calibration's chat template, cached across its short prompts, once added 24 tokens to it).
    assert_measured(main([*args, "--quiet", "--no-calibrate", "--output", str(out)]), out)
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text(encoding="utf-8").splitlines()]
    return summary, records


def _sessions(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_session: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        by_session.setdefault(record["session"], []).append(record)
    return {name: sorted(turns, key=lambda r: r["turn"]) for name, turns in by_session.items()}


def _check_turns(summary: dict[str, Any], records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    assert summary["requests"]["by_outcome"] == {"ok": SESSIONS * TURNS}
    sessions = _sessions(records)
    assert len(sessions) == SESSIONS
    for turns in sessions.values():
        assert [r["turn"] for r in turns] == list(range(1, TURNS + 1))
        prompts = [r["prompt_tokens_reported"] for r in turns]
        assert prompts == sorted(prompts) and prompts[0] < prompts[-1]  # the context grows turn by turn
    return sessions


def test_llamacpp_serves_follow_ups_from_its_prompt_cache(llamacpp: EngineServer, tmp_path: Path) -> None:
    before = engine_samples(llamacpp.base_url)
    summary, records = _bench(llamacpp.base_url, tmp_path / "r", "--turns", str(TURNS), "--think-time", "0.2")
    after = engine_samples(llamacpp.base_url)
    sessions = _check_turns(summary, records)
    for turns in sessions.values():
        assert turns[0]["prompt_tokens_cached"] <= 0.05 * turns[0]["prompt_tokens_reported"]
        for previous, turn in itertools.pairwise(turns):
            # At least the whole previous prompt came back from the slot's cache (the answer's text,
            # re-tokenised from the random model's gibberish, need not match its sampled tokens).
            assert (
                previous["prompt_tokens_reported"]
                <= turn["prompt_tokens_cached"]
                < turn["prompt_tokens_reported"]
            )
    cached = after["llamacpp:prompt_tokens_cached_total"] - before.get(
        "llamacpp:prompt_tokens_cached_total", 0
    )
    assert cached == sum(r["prompt_tokens_cached"] for r in records)  # the engine's counter agrees
    turns = summary["turns"]
    assert turns["followup"]["prompt_tokens_cached"]["hit_ratio"] > 0.4
    assert turns["first"]["prompt_tokens_cached"]["hit_ratio"] <= 0.05


def test_vllm_counts_prefix_cache_hits_on_follow_ups(vllm: EngineServer, tmp_path: Path) -> None:
    before = engine_samples(vllm.base_url)
    summary, records = _bench(vllm.base_url, tmp_path / "r", "--turns", str(TURNS), "--think-time", "0.2")
    after = engine_samples(vllm.base_url)
    sessions = _check_turns(summary, records)

    def increase(name: str) -> float:
        return after[name] - before.get(name, 0.0)

    # Every follow-up's previous prompt is cached in whole blocks; its new message and answer may not be.
    least = sum(
        (previous["prompt_tokens_reported"] // VLLM_BLOCK) * VLLM_BLOCK
        for turns in sessions.values()
        for previous in turns[:-1]
    )
    followups = sum(r["prompt_tokens_reported"] for r in records if r["turn"] > 1)
    assert least > 0 and least <= increase("vllm:prefix_cache_hits_total") <= followups
    assert increase("vllm:prefix_cache_queries_total") >= sum(r["prompt_tokens_reported"] for r in records)


def test_vllm_responses_api(vllm: EngineServer, tmp_path: Path) -> None:
    summary, records = _bench(vllm.base_url, tmp_path / "r", "--api", "responses")
    assert summary["requests"]["by_outcome"] == {"ok": SESSIONS * TURNS}
    for record in records:
        assert record["api"] == "responses" and record["finish_reason"] == "length", record
        assert record["output_tokens"] == record["completion_tokens_reported"] == OUTPUT, record
        # Prompts are calibrated to the server's own count, within its residual (about 1%).
        assert record["prompt_tokens_reported"] >= 0.95 * PROMPT and len(record["intervals"]) == OUTPUT, (
            record
        )
