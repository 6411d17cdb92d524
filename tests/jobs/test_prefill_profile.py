"""Prefill profiling recovers the simulator's own prefill curve over real sockets."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiohttp import web

from exporter.cli import main
from exporter.jobs.prefill_profile import ProfileRequests, profile_prefill
from exporter.load.prompts import SimPromptBuilder
from exporter.probe.client import ProbeClient
from exporter.settings.job_params import geometric_ladder
from exporter.settings.target import TargetSettings
from exporter.sim.engine_presets import PRESETS, isolated_ttft
from exporter.stats.prefill import parse_json
from exporter.streams.request import RequestSpec
from exporter.streams.result import Outcome, ProbeResult
from tests.support.measured import assert_measured
from tests.support.net import serving_app
from tests.support.sim import StartSim

PRESET = "llama-3.1-8b-h100"


@pytest.fixture
async def h100_url(start_sim: StartSim) -> str:
    """The simulated 8B model on one H100: a prefill curve worth profiling."""
    return (await start_sim(preset=PRESET)).url


async def test_profiling_recovers_the_simulators_prefill_curve(h100_url: str) -> None:
    lengths = (128, 512, 1024, 2048, 4096)
    async with ProbeClient(TargetSettings(h100_url, api="completions")) as client:
        profile = await profile_prefill(
            client.send, ProfileRequests(SimPromptBuilder(), "completions", lengths, repeats=3)
        )
    assert profile.model is not None
    for sample in profile.samples:
        assert sample.outcomes == {"ok": 3} and sample.length == sample.prompt_tokens
        truth = isolated_ttft(PRESETS[PRESET], sample.prompt_tokens)
        # Stated tolerance: 3 ms of client and event-loop overhead plus 5% of the modelled prefill.
        assert abs(profile.model.predict(float(sample.prompt_tokens)) - truth) <= 0.003 + 0.05 * truth
    # Beyond the profiled range the curve keeps growing (Etalon's random forest goes flat there).
    assert profile.model.predict(8192.0) > 1.9 * profile.model.predict(4096.0) - 0.01


async def test_a_length_the_model_refuses_is_reported_and_left_out(h100_url: str) -> None:
    async with ProbeClient(TargetSettings(h100_url, api="completions")) as client:
        requests = ProfileRequests(SimPromptBuilder(), "completions", (256, 9000), repeats=1)
        profile = await profile_prefill(client.send, requests)
    refused = profile.samples[1]
    assert refused.best is None and refused.outcomes == {"http_status": 1}
    assert "maximum context length" in refused.errors[0]
    assert profile.model is not None and profile.model.sample_count == 1


def test_geometric_ladder() -> None:
    assert geometric_ladder() == (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
    assert geometric_ladder(100, 1000) == (100, 200, 400, 800, 1000)
    with pytest.raises(ValueError, match="1 <= low <= high"):
        geometric_ladder(10, 5)


def test_profile_command_writes_a_model_bench_can_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "prefill.json"
    flags = ["--sim-preset", PRESET, "--api", "completions", "--lengths", "256,1024,4096", "--repeats", "2"]
    assert main(["profile", *flags, "--output", str(output), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert [s["prompt_tokens"] for s in printed["samples"]] == [256, 1024, 4096]
    model = parse_json(output.read_text())
    assert model.deadline(1024.0, 0.25) > 0.25
    bench = ["bench", "--sim-preset", "tiny", "--requests", "3", "--rate", "20", "--json", "--quiet"]
    code = main([*bench, "--prefill-model", str(output), "--output", str(tmp_path / "b")])
    assert_measured(code, tmp_path / "b")
    summary = json.loads(capsys.readouterr().out)
    assert summary["fluidity"]["deadlines"]["prefill"]["kind"] == "model"


@pytest.mark.slow
def test_one_length_that_fits_is_said_to_make_a_constant_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both lengths over the tiny simulator's 8192-token context: one length (8191) takes their place,
    and a model fitted on it is a constant, which once came without a word."""
    flags = ["--sim-preset", "tiny", "--lengths", "9000,10000", "--repeats", "1"]
    assert main(["profile", *flags, "--output", str(tmp_path / "model.json")]) == 0
    err = capsys.readouterr().err
    assert "prompt lengths 9000, 10000 left out: the server's context is 8192 tokens" in err
    assert "one prompt length answered: the model is a constant TTFT; give two lengths or more" in err


def test_profile_command_with_workers_fits_the_same_curve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "prefill.json"
    flags = ["--sim-preset", PRESET, "--api", "completions", "--lengths", "256,1024,4096", "--repeats", "3"]
    assert main(["profile", *flags, "--workers", "2", "--output", str(output), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert all(s["outcomes"] == {"ok": 3} for s in printed["samples"])
    model = parse_json(output.read_text())
    for length in (256, 1024, 4096):  # isolated requests from worker processes: the engine's own prefill
        truth = isolated_ttft(PRESETS[PRESET], length)
        # Looser than in process (3 ms + 5%): three processes share this 2-core VM.
        assert abs(model.predict(float(length)) - truth) <= 0.010 + 0.10 * truth


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--lengths", "128,abc"], '--lengths "128,abc": expected integers'),
        (["--repeats", "0"], "--repeats must be >= 1"),
        (["--workers", "0"], "--workers 0: must be from 1 to "),
        (["--workers", "999"], "--workers 999: must be from 1 to "),
    ],
)
def test_bad_flags(flags: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profile", "--url", "http://127.0.0.1:9", *flags]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("output", "said"),
    [
        # A folder once got "exists (an earlier result); ... or add --force", and --force then failed.
        ("{tmp}", "cannot write {tmp}: it is a folder; --output names the file to write"),
        # /proc answered "No such file or directory" for a folder that is plainly there.
        ("/proc/x.json", "cannot write /proc/x.json: /proc takes no new files (No such file or directory)"),
        # A mistyped folder was created, from the root down.
        (
            "{tmp}/no/such/x.json",
            "cannot write {tmp}/no/such/x.json: the folder {tmp}/no/such does not exist",
        ),
    ],
)
def test_an_output_that_cannot_be_a_file_is_refused_before_any_request(
    output: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = output.format(tmp=tmp_path)
    assert main(["profile", "--url", "http://127.0.0.1:9", "--output", path]) == 2
    err = capsys.readouterr().err
    assert f"fluidity-exporter profile: error: {said.format(tmp=tmp_path)}" in err
    assert not (tmp_path / "no").exists()


async def test_every_profiling_run_sends_new_prompt_texts() -> None:
    """A repeated profile must not meet its own prompts in the engine's prefix cache."""
    sent: list[list[str]] = [[], []]

    def recorder(run: int) -> Callable[[RequestSpec], Awaitable[ProbeResult]]:
        async def send(spec: RequestSpec) -> ProbeResult:
            sent[run].append(spec.prompt)
            return ProbeResult(api="completions", outcome=Outcome.CONNECT_ERROR, error="refused")

        return send

    for run in (0, 1):
        await profile_prefill(
            recorder(run), ProfileRequests(SimPromptBuilder(), "completions", [16, 64], repeats=2)
        )
    assert len(set(sent[0])) == len(set(sent[1])) == 4
    assert not set(sent[0]) & set(sent[1])


def _one_token_stream(text: str) -> bytes:
    """A llama.cpp completions stream of one token whose text is ``text``, then usage (as captured)."""
    token = {"choices": [{"text": text, "index": 0, "finish_reason": None}], "object": "text_completion"}
    last = {"choices": [{"text": "", "index": 0, "finish_reason": "length"}], "object": "text_completion"}
    last["usage"] = {"completion_tokens": 1, "prompt_tokens": 130, "total_tokens": 131}
    return (
        b"".join(f"data: {json.dumps(event)}\n\n".encode() for event in (token, last)) + b"data: [DONE]\n\n"
    )


async def test_a_token_without_text_is_counted_and_its_prompt_redrawn() -> None:
    """llama.cpp streams a token that is a piece of a multi-byte character as "": nothing to time, so
    the profile draws one more prompt for that repeat, and counts what happened."""
    prompts: list[str] = []

    async def completions(request: web.Request) -> web.StreamResponse:
        prompts.append((await request.json())["prompt"])
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(_one_token_stream("" if len(prompts) == 1 else "x"))
        await response.write_eof()
        return response

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "llama-20m", "object": "model"}]})

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/v1/models", models)
    async with serving_app(app) as url, ProbeClient(TargetSettings(url, api="completions")) as client:
        profile = await profile_prefill(
            client.send, ProfileRequests(SimPromptBuilder(), "completions", [64], repeats=2)
        )
    sample = profile.samples[0]
    assert sample.outcomes == {"no_tokens": 1, "ok": 2} and len(sample.ttfts) == 2
    assert len(prompts) == 3 and len(set(prompts)) == 3  # the redrawn prompt is a new one
