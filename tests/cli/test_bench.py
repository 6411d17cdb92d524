"""``fluidity-exporter bench`` end to end against the simulator in a child process (real sockets)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from exporter.cli import main
from exporter.sim.process import SimProcess
from exporter.stats.batch import IntervalBatch
from exporter.stats.fluidity import evaluate, fluid_token_rate
from tests.support.measured import assert_measured

SMALL = ["--prompt-tokens", "uniform:low=16,high=256", "--output-tokens", "uniform:low=8,high=48", "--quiet"]


@pytest.fixture(scope="module")
def child_sim_url() -> Iterator[str]:
    """A ``tiny`` simulator in a child process, one for the module: ``main(["bench", ...])`` blocks in its
    own event loop, so the simulator cannot share the test's."""
    with SimProcess(["--sim-preset", "tiny"]) as sim:
        yield sim.url


def bench(tmp_path: Path, *flags: str) -> tuple[int, Path]:
    out = tmp_path / "report"
    return main(["bench", *flags, "--output", str(out)]), out


def test_bench_writes_every_file_and_its_summary_is_the_metric_core(
    child_sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = bench(
        tmp_path, "--url", child_sim_url, "--api", "completions", "--requests", "30", "--rate", "20", *SMALL
    )
    assert_measured(code, out)
    names = {p.name for p in out.iterdir()}
    assert {"requests.jsonl", "summary.json", "requests.csv", "tbt.csv", "deadline_miss_rate.csv"} <= names
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert len(records) == 30 and summary["requests"]["by_outcome"] == {"ok": 30}
    assert all(r["output_tokens"] == r["completion_tokens_reported"] for r in records)
    batch = IntervalBatch.from_sequences(r["intervals"] for r in records)
    for tier, seconds in (("strict", 0.025), ("medium", 0.05), ("relaxed", 0.1)):
        expected = evaluate(batch, 1.0, seconds).service_level
        assert summary["fluidity"]["tiers"][tier]["service_level"] == pytest.approx(expected, abs=1e-12)
    assert summary["rates"]["fluid_token_rate"] == pytest.approx(fluid_token_rate(batch), rel=1e-9)
    printed = capsys.readouterr().out
    assert "fluid token rate" in printed and "TTFT (s)" in printed


def test_json_closed_loop_with_slos_and_goodput(
    child_sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--url", child_sim_url, "--concurrency", "4", "--requests", "12", "--json", *SMALL]
    flags += [
        "--objective",
        "ttft:p99<=5",
        "--objective",
        "fluidity:p99>=0.5",
        "--goodput",
        "ttft<=5,min_fluidity>=0.5",
    ]
    code, out = bench(tmp_path, *flags)
    assert_measured(code, out)
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests"]["completed"] == 12
    assert [s["met"] for s in summary["slos"]] == [True, True]
    assert summary["goodput"]["good"] == 12
    assert any(check["name"] == "concurrency" for check in summary["health_checks"])


def test_failures_are_counted_and_a_failed_target_exits_1(
    child_sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--url", child_sim_url, "--requests", "6", "--rate", "30", "--json", *SMALL]
    flags += ["--objective", "fluidity:p50>=0.9"]
    code, out = bench(tmp_path, *flags, "--extra-body", '{"sim": {"fault": "http_503"}}')
    assert code == 1  # every request failed: the exit code says so (it was 0)
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["requests"]["by_outcome"] == {"http_status": 6}
    assert summary["requests"]["first_error"]["http_status"].startswith(
        "HTTP 503: "
    )  # why, not only how many
    # No completed request: no service level (it was a measured 1.0), and the objective is missed on
    # the six failed requests, as a capacity trial judges it (it was met on none).
    assert {tier["service_level"] for tier in summary["fluidity"]["tiers"].values()} == {None}
    assert summary["slos"][0] | {"observed": 0.0} == {
        "slo": "fluidity:p50>=0.9",
        "observed": 0.0,
        "threshold": 0.9,
        "met": False,
        "samples": 6,
        "samples_of": "requests",
        "failed_requests": 6,
    }
    assert summary["requests"]["http_status"] == {"503": 6}
    assert summary["reliable"] is False  # the success check fails, and says so
    assert "success" in summary["failed_checks"]
    assert f"files to {out}" in captured.err  # --json keeps stdout for the JSON, and still says where
    assert len((out / "requests.jsonl").read_text().splitlines()) == 6


@pytest.mark.parametrize(
    ("load", "requests"),
    [(["--rate", "25"], 20), (["--concurrency", "3"], 12)],
    ids=["an open load is spread", "a closed loop is split"],
)
def test_worker_processes_send_every_request_once(
    child_sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], load: list[str], requests: int
) -> None:
    flags = ["--url", child_sim_url, "--requests", str(requests), *load, "--workers", "2", "--json", *SMALL]
    code, out = bench(tmp_path, *flags)
    assert_measured(code, out)
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests"]["by_outcome"] == {"ok": requests}
    assert len((out / "requests.jsonl").read_text().splitlines()) == requests


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--workload", "chatt"], 'unknown workload preset "chatt"; valid: '),
        (
            ["--prompt-tokens", "gauss:mean=3"],
            '--prompt-tokens: unknown length distribution "gauss"; valid: ',
        ),
        (
            ["--rate", "2", "--concurrency", "3"],
            "give either --arrival/--rate (open loop) or --concurrency (closed loop), not both",
        ),
        (["--objective", "ttfb:p99<=1"], '--objective: unknown SLO metric "ttfb"'),
        (["--goodput", "latency<=1"], '--goodput: unknown bound "latency"; valid: ttft, tpot'),
        (["--goodput", "ttft>=2"], '--goodput: "ttft>=2": ttft takes <= only (got >=), e.g. ttft<=2'),
        (["--goodput", "min_fluidity<=0.9"], '--goodput: "min_fluidity<=0.9": min_fluidity takes >= only'),
        (
            ["--arrival", "burst"],
            '--arrival: unknown arrival process "burst"; valid: constant, gamma, poisson',
        ),
        (["--decode-tiers", "medium=fast"], '--decode-tiers.medium: bad duration "fast"; use seconds'),
        (["--header", "nocolon"], '--header "nocolon": expected NAME:VALUE'),
        (
            ["--api-key-env", "FLUIDITY_TEST_UNSET_KEY"],
            "environment variable FLUIDITY_TEST_UNSET_KEY is not set",
        ),
        (["--api", "completions", "--tool-calls"], "--tool-calls: needs --api chat or responses"),
        (["--turns", "3", "--tool-calls"], "--tool-calls and --turns above 1 exclude each other"),
        (["--turns", "zipf:a=0"], "--turns: "),
        # Once 15-token prompts, recorded as asked for: 0 clipped to 1, then to the prompt builder's floor.
        (["--prompt-tokens", "fixed:0"], '--prompt-tokens: fixed: field "value" (0) is below "min" (1)'),
        (["--think-time", "gamma:k=1"], '--think-time: unknown think-time distribution "gamma"'),
        (["--response-format", "[1]"], "--response-format: expected a JSON object"),
        (
            ["--turns", "2", "--requests", "4", "--workers", "2"],
            "--workers: multi-turn sessions (--turns) run in one",
        ),
        # Amounts that could send nothing, and a URL without its scheme: each once a traceback.
        (["--requests", "0"], "--requests must be >= 1, got 0"),
        (["--requests", "-5"], "--requests must be >= 1, got -5"),
        (["--concurrency", "0"], "--concurrency must be >= 1, got 0"),
        (["--duration", "0"], "--duration must be > 0 seconds, got 0"),
        (["--workers", "0"], "--workers 0: must be from 1 to "),
        (["--workers", "999"], "--workers 999: must be from 1 to "),  # once 999 forked processes
        (["--seed", "-1"], "--seed must be an integer >= 0, got -1"),  # numpy's ValueError, once
        (["--header", "X-A: a\nb"], "--header.X-A: the value must not hold a line break or NUL"),
        (
            ["--url", "127.0.0.1:18000"],
            '--url: must be an http(s) URL like http://host:8000, got "127.0.0.1:18000"',
        ),
    ],
)
def test_bad_flags_exit_2_with_a_message(
    child_sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    code, _ = bench(tmp_path, "--url", child_sim_url, "--requests", "1", *flags)
    assert code == 2
    assert message in capsys.readouterr().err


def test_an_earlier_result_is_kept_unless_forced(
    child_sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--url", child_sim_url, "--requests", "2", "--concurrency", "2", *SMALL]
    code, out = bench(tmp_path, *flags)
    assert_measured(code, out)
    first = (out / "summary.json").read_text()
    code, _ = bench(tmp_path, *flags)
    assert code == 2  # refused before any load: the earlier summary is untouched
    assert f"{out / 'summary.json'} exists (an earlier result)" in capsys.readouterr().err
    assert (out / "summary.json").read_text() == first
    code, _ = bench(tmp_path, *flags, "--force")
    assert_measured(code, out)


def test_config_file_keys_are_flags_and_unknown_keys_are_named(
    child_sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "bench.yaml"
    config.write_text(f"url: {child_sim_url}\nrequests: 3\nrate: 30\noutput-tokens: 16\nprompt_tokens: 128\n")
    code, out = bench(tmp_path, "--config", str(config), "--json", "--quiet")
    assert_measured(code, out)
    assert json.loads(capsys.readouterr().out)["requests"]["completed"] == 3
    config.write_text("rates: 3\nworker: 2\n")
    code, _ = bench(tmp_path, "--config", str(config))
    assert code == 2  # every unknown key is named, not only the first
    assert 'unknown keys "rates", "worker"; valid (the flags\' names, with dashes or underscores): ' in (
        capsys.readouterr().err
    )


def test_api_key_never_reaches_the_report(
    child_sim_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLUIDITY_TEST_KEY", "sk-very-secret-value")
    code, out = bench(
        tmp_path,
        "--url",
        child_sim_url,
        "--requests",
        "2",
        "--rate",
        "30",
        "--api-key-env",
        "FLUIDITY_TEST_KEY",
        *["--prompt-tokens", "fixed:200", "--output-tokens", "fixed:8", "--quiet"],
    )
    assert_measured(code, out)
    captured = capsys.readouterr()
    everything = captured.out + captured.err + "".join(p.read_text() for p in out.iterdir())
    assert "sk-very-secret-value" not in everything


@pytest.mark.parametrize("load", [["--concurrency", "2"], ["--rate", "20"]])
def test_duration_limited_loads(
    child_sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], load: list[str]
) -> None:
    code, out = bench(tmp_path, "--url", child_sim_url, *load, "--duration", "1.0", "--json", *SMALL)
    assert_measured(code, out)
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests"]["completed"] >= 4
    assert summary["duration_s"] < 10


def test_default_target_is_the_simulator_and_presets_fit_its_context(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # sharegpt allows 16K prompts; the simulator's context is 8K: without a fit some requests would 400.
    code, out = bench(
        tmp_path, "--sim-preset", "tiny", "--requests", "12", "--rate", "20", "--json", "--quiet"
    )
    assert_measured(code, out)
    summary = json.loads(capsys.readouterr().out)
    assert summary["requests"]["by_outcome"] == {"ok": 12}
    assert summary["latency"]["output_tokens"]["max"] <= 4096


def test_multi_turn_sessions_report_first_and_follow_up_turns_apart(
    child_sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = [
        "--url",
        child_sim_url,
        "--requests",
        "12",
        "--rate",
        "10",
        "--turns",
        "3",
        "--think-time",
        "fixed:0.05",
    ]
    code, out = bench(tmp_path, *flags, "--json", *SMALL)
    assert_measured(code, out)
    summary = json.loads(capsys.readouterr().out)
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert len(records) == 12 and summary["requests"]["by_outcome"] == {"ok": 12}
    sessions: dict[str, list[int]] = {}
    for record in records:
        sessions.setdefault(record["session"], []).append(record["turn"])
    assert sorted(sessions.values()) == [[1, 2, 3]] * 4
    turns = summary["turns"]
    assert (turns["sessions"], turns["first"]["requests"], turns["followup"]["requests"]) == (4, 4, 8)
    assert turns["first"]["prompt_tokens_cached"]["cached_tokens"] == 0
    # Follow-ups re-send the conversation: most of each prompt comes from the simulator's prefix cache.
    assert turns["followup"]["prompt_tokens_cached"]["hit_ratio"] > 0.5
    cached = sum(r["prompt_tokens_cached"] for r in records if r["turn"] > 1)
    assert cached == turns["followup"]["prompt_tokens_cached"]["cached_tokens"]
    assert turns["followup"]["ttft"]["count"] == 8


def test_responses_api_with_tool_calls(
    child_sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--url", child_sim_url, "--api", "responses", "--tool-calls", "--requests", "6", "--rate", "20"]
    code, out = bench(tmp_path, *flags, "--json", *SMALL)
    assert_measured(code, out)
    summary = json.loads(capsys.readouterr().out)
    records = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert summary["requests"]["by_outcome"] == {"ok": 6}
    assert all(r["api"] == "responses" and r["tool_call_tokens"] == r["output_tokens"] > 0 for r in records)
    assert summary["turns"]["first"]["output_tokens"] == {
        "text": 0,
        "tool_call": sum(r["output_tokens"] for r in records),
    }


def _wait_for_line(stream: IO[str], prefix: str, timeout_s: float) -> bool:
    """Read ``stream``'s pipe until a line starting with ``prefix``, for at most ``timeout_s`` seconds.

    Raw reads of the descriptor: the text wrapper's buffer would hide lines from ``select``."""
    deadline, seen = time.monotonic() + timeout_s, b"\n"
    needle = b"\n" + prefix.encode()
    while needle not in seen and (left := deadline - time.monotonic()) > 0:
        ready, _, _ = select.select([stream], [], [], left)
        chunk = os.read(stream.fileno(), 65536) if ready else b""
        if not chunk:
            return False
        seen += chunk
    return needle in seen


def test_ctrl_c_stops_sending_and_reports_what_was_sent(child_sim_url: str, tmp_path: Path) -> None:
    out = tmp_path / "report"
    command = [sys.executable, "-m", "exporter", "bench", "--url", child_sim_url, "--requests", "200"]
    command += ["--rate", "5", *SMALL[:-1], "--output", str(out)]  # not --quiet: the target line
    bench_process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        # Timed from the line said just before the load, not from the start: imports alone take
        # seconds on a busy machine, and a Ctrl-C before the load is another test's case.
        assert bench_process.stderr is not None
        assert _wait_for_line(bench_process.stderr, "target ", timeout_s=60), "no target line"
        time.sleep(2)  # a few requests sent, most of the 40 s plan still to come
        bench_process.send_signal(signal.SIGINT)
        _, err = bench_process.communicate(timeout=60)  # the requests in flight end, then the report
    finally:
        bench_process.kill()
    assert bench_process.returncode == 130, err
    assert "interrupted: the requests in flight end" in err
    summary = json.loads((out / "summary.json").read_text())
    sent = summary["requests"]["total"]
    assert 0 < sent < 200 and f"the report covers the {sent} requests sent before Ctrl-C" in err
    assert len((out / "requests.jsonl").read_text().splitlines()) == sent


def test_requests_and_duration_together_end_at_whichever_comes_first(
    child_sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """As ``--duration``'s help says: at most ``--requests``, and none sent after ``--duration``."""
    flags = ["--url", child_sim_url, "--rate", "20", "--duration", "0.5", *SMALL]
    code, out = bench(tmp_path, *flags, "--requests", "1000")
    assert_measured(code, out)
    assert 1 <= len((out / "requests.jsonl").read_text().splitlines()) < 40  # cut by the duration
    code, out = bench(tmp_path, *flags, "--requests", "3", "--force")
    assert_measured(code, out)
    assert len((out / "requests.jsonl").read_text().splitlines()) == 3  # cut by the count


def test_the_result_says_what_fitting_to_the_context_left_out(
    child_sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The line before the load said "the result says what that leaves out"; neither output did."""
    lengths = ["--prompt-tokens", "uniform:low=16,high=16000", "--output-tokens", "fixed:8", "--quiet"]
    code, out = bench(tmp_path, "--url", child_sim_url, "--requests", "4", *lengths)
    assert code in (0, 1) and (out / "summary.json").exists()  # its timings are not what is checked
    fit = json.loads((out / "summary.json").read_text())["target"]["context_fit"]
    assert fit["max_model_len"] == 8192 and 7000 < fit["max_total_tokens"] <= 8192  # less a margin
    assert fit["share_cut"] == pytest.approx(1 - (fit["max_total_tokens"] - 8 - 16) / 15984, abs=0.05)
    printed = capsys.readouterr().out
    limit, cut = fit["max_total_tokens"], fit["share_cut"]
    assert f"cut to fit it: prompt + output <= {limit}, which leaves out about {cut:.0%}" in printed


def test_streams_a_server_ends_before_max_tokens_completed_and_warn_of_the_workload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that ends streams at its own stop although ignore_eos was asked (OpenAI's, many
    gateways'): every request was ``truncated``, "0.0% completed", exit 1, on timings that were valid."""
    flags = ["--requests", "8", "--rate", "20", "--output-tokens", "fixed:64", *SMALL[:2], "--quiet"]
    with SimProcess(["--sim-preset", "tiny", "--eos-rate", "0.2", "--seed", "1"]) as sim:
        # The server-side guarantee dropped per request, as such a server drops it.
        ignored = '{"ignore_eos": false, "min_tokens": 0}'
        code, out = bench(tmp_path, "--url", sim.url, "--extra-body", ignored, *flags)
    assert_measured(code, out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["by_outcome"] == {"ok": 8}
    assert (
        summary["workload_warnings"] == ["output_tokens"] and "output_tokens" not in summary["failed_checks"]
    )
    check = next(c for c in summary["health_checks"] if c["name"] == "output_tokens")
    assert check["passed"] is False and check["required"] is False
    table = capsys.readouterr().out
    assert "  warn output_tokens: " in table and "timings valid" in table


def test_a_closed_loop_of_sessions_is_not_failed_by_a_check_that_does_not_apply(
    child_sim_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Think times leave a closed loop's slots idle by design, so its concurrency cannot be judged; it
    failed every multi-turn closed-loop run ("one that could not be judged fails")."""
    flags = ["--url", child_sim_url, "--concurrency", "2", "--requests", "6", "--turns", "2"]
    code, out = bench(tmp_path, *flags, "--think-time", "fixed:0.05", *SMALL)
    assert_measured(code, out)
    summary = json.loads((out / "summary.json").read_text())
    check = next(c for c in summary["health_checks"] if c["name"] == "concurrency")
    assert check["applies"] is False and "concurrency" not in summary["failed_checks"]
    assert "  n/a  concurrency: does not apply" in capsys.readouterr().out
