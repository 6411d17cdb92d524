"""Prompt calibration and context fitting against the simulator, whose tokenizer differs from the
words-as-tokens guess (a word of four letters or more is two of its tokens), over real sockets."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from exporter.cli import main
from exporter.load.calibration import (
    CALIBRATION_REQUESTS,
    SHORT_REPEATS,
    calibrate_prompts,
    max_model_len,
)
from exporter.load.prompts import ApproxPromptBuilder
from exporter.probe.client import ProbeClient
from exporter.settings.target import TargetSettings
from exporter.sim import SimServer
from exporter.sim.process import SimProcess
from exporter.streams.request import RequestSpec
from exporter.streams.result import Outcome, ProbeResult


@pytest.fixture(scope="module")
def small_context_sim() -> Iterator[str]:
    with SimProcess(["--sim-preset", "tiny", "--max-model-len", "2048"]) as sim:
        yield sim.url


@pytest.mark.parametrize("api", ["chat", "completions"])
async def test_calibrated_prompts_are_the_length_asked_for(sim_url: str, api: str) -> None:
    async with ProbeClient(TargetSettings(base_url=sim_url, api=api)) as client:  # type: ignore[arg-type]
        uncalibrated = await client.send(RequestSpec(*ApproxPromptBuilder().text(1000, 1), 1))
        calibration = await calibrate_prompts(client.send, api)  # type: ignore[arg-type]
        assert calibration.tokens_per_word is not None and calibration.residual is not None
        assert calibration.residual <= 0.02
        for asked in (300, 2000):
            if api == "chat":
                messages, _ = calibration.builder.chat(asked, 42 + asked)
                spec = RequestSpec(messages[-1][1], 1, asked, messages)
            else:
                spec = RequestSpec(calibration.builder.text(asked, 42 + asked)[0], 1, asked)
            result = await client.send(spec)
            assert result.prompt_tokens_reported is not None
            assert abs(result.prompt_tokens_reported - asked) <= 0.05 * asked
    # Without calibration the same builder is far off (the issue saw +82%).
    assert uncalibrated.prompt_tokens_reported is not None and uncalibrated.prompt_tokens_reported > 1500
    assert "residual error after fitting" in calibration.describe()


async def test_the_overhead_is_read_off_short_prompts_and_a_short_prompt_is_never_empty(sim_url: str) -> None:
    """The simulator's completions add no tokens to a prompt: a fit through one prompt of 256 words and
    one of 1024 read up to 22 (its words' mix), and prompts of a few tokens were sent empty, which vLLM
    refuses (4 intended, 0 reported)."""
    async with ProbeClient(TargetSettings(base_url=sim_url, api="completions")) as client:
        calibration = await calibrate_prompts(client.send, "completions", salt=2)  # the old fit read 9.7
        assert calibration.overhead_tokens < 2.5
        for asked in (1, 4, 10):
            result = await client.send(RequestSpec(calibration.builder.text(asked, 900 + asked)[0], 1, asked))
            assert result.prompt_tokens_reported is not None and result.prompt_tokens_reported >= 1
    assert ApproxPromptBuilder(tokens_per_word=1.8, overhead_tokens=5.0).text(2, 0)[0].strip() != ""
    assert ApproxPromptBuilder().text(0, 0)[0] == ""  # none asked, none sent


def test_max_model_len_is_read_when_the_server_gives_it() -> None:
    assert max_model_len(b'{"data": [{"id": "m", "max_model_len": 8192}]}') == 8192
    assert max_model_len(b'{"data": [{"id": "m"}]}') is None
    assert max_model_len(b"not json") is None


def test_bench_against_a_foreign_tokenizer_sends_what_it_asks_for(
    small_context_sim: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    flags = ["bench", "--url", small_context_sim, "--workload", "sharegpt", "--requests", "30"]
    main([*flags, "--rate", "20", "--json", "--quiet", "--output", str(out)])
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests"]["by_outcome"] == {"ok": 30}  # none over the 2048-token context
    assert summary["target"]["max_model_len"] == 2048
    assert summary["target"]["prompt_calibration"]["residual"] <= 0.02
    check = next(c for c in summary["health_checks"] if c["name"] == "prompt_tokens")
    assert check["passed"] is True and check["observed"] <= 0.05


def test_profile_fits_its_ladder_to_the_context(
    small_context_sim: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "model.json"
    flags = ["profile", "--url", small_context_sim, "--api", "completions", "--repeats", "1"]
    assert main([*flags, "--max-length", "8192", "--output", str(output), "--json"]) == 0
    captured = capsys.readouterr()
    samples = json.loads(captured.out)["samples"]
    assert [s["prompt_tokens"] for s in samples] == [128, 256, 512, 1024, 1985]
    assert all(s["outcomes"] == {"ok": 1} for s in samples), samples  # nothing sent that must fail
    # The context line says which lengths fit (it said "requests fit in it" above the lengths left out).
    fit = "prompt lengths 128, 256, 512, 1024, 1985 fit in it"
    assert f"context: the server serves 2048 tokens (max_model_len); {fit}\n" in captured.err
    assert "prompt lengths 2048, 4096, 8192 left out: the server's context is 2048 tokens" in captured.err
    assert f"wrote {output}" in captured.err


async def test_a_token_without_text_still_calibrates() -> None:
    """llama.cpp streams a token that is a piece of a multi-byte character as "" (``no_tokens``); its
    usage still counts the prompt, which is all calibration reads."""

    async def send(spec: RequestSpec) -> ProbeResult:
        counted = round(1.5 * len(spec.prompt.split())) + 7  # a tokenizer of 1.5 tokens a word, + a template
        return ProbeResult(api="completions", outcome=Outcome.NO_TOKENS, prompt_tokens_reported=counted)

    calibration = await calibrate_prompts(send, "completions")
    assert calibration.tokens_per_word is not None and abs(calibration.tokens_per_word - 1.5) < 0.05


async def test_a_failed_check_says_why_its_residual_is_unknown() -> None:
    sent: list[RequestSpec] = []

    async def send(spec: RequestSpec) -> ProbeResult:
        sent.append(spec)
        if len(sent) == SHORT_REPEATS + 2:  # the check, after the fitting requests
            return ProbeResult(api="completions", outcome=Outcome.HTTP_STATUS, error="HTTP 503")
        counted = round(1.5 * len(spec.prompt.split())) + 7
        return ProbeResult(api="completions", outcome=Outcome.OK, prompt_tokens_reported=counted)

    calibration = await calibrate_prompts(send, "completions")
    assert calibration.residual is None
    assert calibration.finding().endswith(
        "the 512-token check request failed, so the residual error is unknown"
    )
    assert calibration.describe().endswith(f"unknown ({SHORT_REPEATS + 2} requests, 0.0 s)")


@pytest.fixture
def non_llm_url() -> Iterator[str]:
    """A plain HTTP file server: it answers every POST with 501, as ``python -m http.server`` does."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


async def test_failed_calibration_requests_are_called_failed_not_countless(non_llm_url: str) -> None:
    async with ProbeClient(TargetSettings(base_url=non_llm_url, model="x")) as client:
        calibration = await calibrate_prompts(client.send, "chat")
    assert calibration.tokens_per_word is None
    assert calibration.describe().startswith(
        "prompt calibration: a fitting request failed (http_status 501; the rest and the check were not sent); "
        "prompt lengths are approximate (1 requests, "
    )


async def test_a_failing_server_is_spared_the_rest_of_the_calibration() -> None:
    """Against a server that fails, each request may wait out its timeout: the first failure ends the
    calibration (all seven fitting requests went out, one after another)."""
    sent: list[RequestSpec] = []

    async def send(spec: RequestSpec) -> ProbeResult:
        sent.append(spec)
        return ProbeResult(api="completions", outcome=Outcome.TTFT_TIMEOUT, error="timed out")

    calibration = await calibrate_prompts(send, "completions")
    assert calibration.tokens_per_word is None and len(sent) == 1
    assert (
        "a fitting request failed (ttft_timeout; the rest and the check were not sent)"
        in calibration.describe()
    )


@pytest.mark.parametrize("context", [None, 2560, 4096, 2048, 512, 64])
def test_calibration_lengths_fit_a_short_context(context: int | None) -> None:
    from exporter.load.calibration import CONTEXT_SHARE, calibration_lengths

    low, high, check = calibration_lengths(context)
    assert low < check < high
    if context is None or context * CONTEXT_SHARE >= 1024:
        assert (low, high, check) == (8, 1024, 512)
    else:
        assert high <= max(context * CONTEXT_SHARE, 16)


async def test_a_slow_target_fails_the_calibration_within_its_budget(sim: SimServer, sim_url: str) -> None:
    """Against a server that stalled 20 s a request, calibration took most of two minutes before a
    2-request run (and the daemon's first probe waited on it): its requests now have a budget in all,
    the one in flight when it runs out is cut, and the line says what it cost."""
    stall = ("sim", {"fault": {"mode": "hang_before_headers", "duration": 0.6}})
    settings = TargetSettings(base_url=sim_url, api="completions", extra_body=(stall,))
    async with ProbeClient(settings) as client:
        started = time.monotonic()
        calibration = await calibrate_prompts(client.send, "completions", budget_s=1.0)
        took = time.monotonic() - started
    assert calibration.tokens_per_word is None and calibration.requests == 2  # the second one cut
    assert 1.0 <= took < 1.5 and calibration.seconds == pytest.approx(took, abs=0.05)
    assert calibration.describe().startswith(
        f"prompt calibration: the calibration's 1 s ran out after 2 of {CALIBRATION_REQUESTS} requests "
        "(the target answers slowly; the rest were not sent); prompt lengths are approximate (2 requests, 1."
    )
