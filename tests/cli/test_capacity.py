"""``fluidity-exporter capacity`` end to end against the simulator in a child process."""

from __future__ import annotations

import http.server
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.cli import main
from tests.support.measured import assert_capacity_measured
from tests.support.net import free_port


def test_capacity_command_writes_its_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    flags = ["--sim-preset", "tiny", "--prompt-tokens", "fixed:64", "--output-tokens", "fixed:16"]
    flags += ["--start", "40", "--max-trials", "2", "--requests-per-trial", "20", "--warmup-requests", "0"]
    assert_capacity_measured(main(["capacity", *flags, "--output", str(out), "--no-plots"]), out)
    captured = capsys.readouterr()
    assert "trial 1/2: 40 req/s" in captured.err  # the progress line
    result = json.loads((out / "capacity.json").read_text())
    assert [t["index"] for t in result["trials"]] == [1, 2]
    assert result["trials"][0]["load"] == 40
    assert all(t["figures"]["requests"] == 20 for t in result["trials"])
    # The second trial began once the simulator's own /metrics showed it idle, not after a blind pause.
    assert result["trials"][1]["drained_by"] == "engine_idle"
    assert (
        "answer (lower_bound): capacity at least" in captured.out
        and f"{len(result['trials'])} trials" in captured.out
    )
    # The tiny preset serves 8192 tokens, and 64 + 16 fit it whole: said in the report and the JSON.
    assert result["context"] == {"max_model_len": 8192, "max_total_tokens": 8192, "share_cut": 0.0}
    assert "context: the target serves 8192 tokens (max_model_len); every request fits it" in captured.out
    # Two passing trials and no failure: a lower bound, said so, with no capacity number.
    assert result["state"] == "lower_bound" and result["capacity"] is None
    assert result["lower_bound"] == max(t["load"] for t in result["trials"])
    # 20 of 20 cannot show 99% with confidence (the interval starts at 83%): the answer says so.
    end = result["pass_intervals"]["lower_bound"]
    assert end["verdict"] == "inconclusive" and end["successes"] == end["requests"]
    assert f"not confidently: {end['successes']} of {end['requests']} requests fluid there" in captured.out
    # Each trial offers its nominal rate over its measured requests, not its Poisson sample's own rate
    # (which differs from it by about 1/sqrt(20), 22 %, typically): goodput is per second of that.
    for trial in result["trials"]:
        assert trial["figures"]["offered_rate_per_s"] == pytest.approx(trial["load"], rel=1e-9)


def test_capacity_command_refuses_a_workload_over_the_context_with_it_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before any trial, as the jobs API's capacity job does: it once ended in a ValueError's traceback."""
    flags = ["--sim-preset", "tiny", "--prompt-tokens", "fixed:9000", "--output-tokens", "fixed:16"]
    out = tmp_path / "out"
    assert main(["capacity", *flags, "--max-trials", "1", "--output", str(out), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "no trial ran: the workload cannot fit the 8192 tokens the target serves (max_model_len)" in err
    assert "prompt fixed:value=9000" in err and "prompt + output <= 8192 tokens" in err, err
    assert not (out / "capacity.json").exists()


def test_capacity_command_prices_the_fluid_goodput(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    flags = ["--sim-preset", "tiny", "--prompt-tokens", "fixed:64", "--output-tokens", "fixed:16"]
    flags += ["--start", "10", "--max-trials", "1", "--requests-per-trial", "20", "--warmup-requests", "0"]
    flags += ["--gpus", "2", "--gpu-hour-price", "3.6"]
    assert_capacity_measured(main(["capacity", *flags, "--output", str(out), "--no-plots"]), out)
    captured = capsys.readouterr()
    result = json.loads((out / "capacity.json").read_text())
    trial = result["trials"][0]
    point = result["costs"]["capacity"]
    # 20 requests of 16 tokens, all fluid, sent at ~10 req/s: ~160 fluid tokens/s over 2 GPUs.
    offered = trial["figures"]["offered_rate_per_s"]
    assert point["fluid_goodput_tokens_per_s"] == pytest.approx(
        16 * offered * trial["figures"]["fluid_share"]
    )
    assert point["fluid_tokens_per_gpu_second"] == pytest.approx(point["fluid_goodput_tokens_per_s"] / 2)
    assert point["cost_per_million_fluid_tokens"] == pytest.approx(
        3.6 / 3600 / point["fluid_tokens_per_gpu_second"] * 1e6
    )
    assert result["costs"]["highest_load"]["load"] == 10
    assert "per million fluid tokens" in captured.out
    # The progress says when the first trial starts, before any of its requests is done.
    assert any(
        re.search(r"0% trial 1/1: 10 req/s, 20 requests, at most \d+ s$", line)
        for line in captured.err.splitlines()
    )


def test_a_search_whose_trial_measured_nothing_says_so_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """At 1 req/s, 20 warm-up requests sent 1 s apart take 20 s: a 10 s trial measures nothing. It
    said "not met at any load tried" and exited 0, after steering down to the floor."""
    out = tmp_path / "out"
    flags = ["--sim-preset", "tiny", "--prompt-tokens", "fixed:16", "--output-tokens", "fixed:4"]
    flags += [
        "--start",
        "1",
        "--requests-per-trial",
        "10",
        "--warmup-requests",
        "20",
        "--trial-duration",
        "10",
        "--arrival",
        "constant",
    ]
    assert main(["capacity", *flags, "--output", str(out), "--no-plots"]) == 1
    captured = capsys.readouterr()
    result = json.loads((out / "capacity.json").read_text())
    assert result["state"] is None and result["capacity"] is None and len(result["trials"]) == 1
    assert result["trials"][0]["ended_by"] == "duration"
    assert result["stopped_by"].startswith("no_data: trial 1 at 1 req/s measured no request (")
    assert "answer (none): no capacity: no trial's result could be judged" in captured.out
    assert "fluid goodput" not in captured.out  # an unjudged trial's figures are not priced


def test_a_closed_loop_offers_the_rate_its_slots_achieved(tmp_path: Path) -> None:
    """Every request of a closed loop at a concurrency near its trial's size leaves at once: its rate
    is its requests over the trial's span, not over the ~0 s between their sends."""
    out = tmp_path / "out"
    flags = ["--sim-preset", "tiny", "--prompt-tokens", "fixed:64", "--output-tokens", "fixed:16"]
    flags += ["--load", "concurrency", "--start", "10", "--max-trials", "1"]
    flags += ["--requests-per-trial", "20", "--warmup-requests", "0", "--no-early-stop"]
    assert_capacity_measured(main(["capacity", *flags, "--output", str(out), "--no-plots"]), out)
    figures = json.loads((out / "capacity.json").read_text())["trials"][0]["figures"]
    assert figures["offered_rate_per_s"] == pytest.approx(20 / figures["duration_s"])
    tokens = figures["fluid_goodput_tokens_per_s"]
    assert tokens == pytest.approx(16 * figures["offered_rate_per_s"] * figures["fluid_share"])


def test_an_answer_on_timings_the_client_distrusts_exits_1_and_says_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server that writes each stream's chunks four at a time, 10 ms apart, has them read four to a
    read: the client cannot tell that from reading them late itself (their stamps could be 10 ms
    wrong) and flags the requests. The answer then rests on timings it distrusts: exit 1, as bench
    fails such a run."""
    out = tmp_path / "out"
    flags = ["--sim-preset", "tiny", "--prompt-tokens", "fixed:64", "--output-tokens", "fixed:32"]
    flags += ["--load", "concurrency", "--start", "4", "--max-trials", "1", "--requests-per-trial", "10"]
    flags += ["--warmup-requests", "0", "--no-early-stop"]
    bursts = {"ttft": 0.01, "gaps": [0.0, 0.0, 0.0, 0.01] * 8}
    flags += ["--extra-body", json.dumps({"sim": {"script": bursts}})]
    assert main(["capacity", *flags, "--output", str(out), "--no-plots"]) == 1
    result = json.loads((out / "capacity.json").read_text())
    flagged = result["trials"][0]["figures"]["unreliable"]
    assert flagged > 0
    message = result["unreliable_timings"]
    assert message == (
        "the answer rests on timings the probe's client flagged unreliable (trial 1 at 4 concurrent: "
        f"{flagged} of 10 requests; at most 1% may be): it read chunks of a stream together, either late "
        "itself (give it more CPU: --workers or jobs.workers, or a quieter machine) or as the server "
        "sent them, in bursts (a buffering gateway: probe the engine directly to tell)"
    )
    captured = capsys.readouterr()
    assert f"fluidity-exporter capacity: error: {message}" in captured.err
    assert f", {flagged} timed unreliably, " in captured.err  # the trial's progress line
    assert "; its timings unreliable (unreliable_timings)" in captured.out  # and the answer's


@pytest.mark.slow
def test_capacity_command_with_workers_shards_each_trial(tmp_path: Path) -> None:
    out = tmp_path / "out"
    flags = ["--sim-preset", "tiny", "--prompt-tokens", "fixed:64", "--output-tokens", "fixed:16"]
    flags += ["--start", "20", "--max-trials", "2", "--requests-per-trial", "20", "--warmup-requests", "2"]
    code = main(["capacity", *flags, "--workers", "2", "--output", str(out), "--no-plots"])
    result = json.loads((out / "capacity.json").read_text())
    first = result["trials"][0]
    assert first["figures"]["requests"] == 20 and first["requests_sent"] == 22
    shards = first["figures"]["shards"]["shards"]
    assert [s["shard"] for s in shards] == [0, 1] and sum(s["results"] for s in shards) == 22
    assert all(s["start_lateness_s"] is not None and s["done"] for s in shards)
    # On this 2-core VM the simulator and two shards may saturate a shard: then the search says so,
    # stops at that trial, and exits 1 (not a measurement).
    for trial in result["trials"]:
        assert (trial["reason"] == "shards") == bool(trial["figures"]["shards"]["problems"])
    stopped = result["stopped_by"].startswith("shards: ")
    assert stopped == (result["trials"][-1]["reason"] == "shards")
    assert code == (1 if stopped or result["unreliable_timings"] else 0)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--tolerance", "0.9"], "--tolerance: must be a number in (0, 0.5], got 0.9"),
        (
            ["--decode-tier", "sluggish"],
            '--decode-tier: unknown decode tier "sluggish"; valid: strict, medium, relaxed '
            "(or give --decode-deadline)",
        ),
        (["--load", "concurrency", "--start", "2.5"], "--start: must be a whole number"),
        (["--objective", "ttft:p99>=2"], "--objective: "),
        (["--min-load", "20", "--max-load", "10"], "--min-load: 20 is above max_load (10)"),
        (["--trial-duration", "1"], "--trial-duration: 1 s is below one trial's minimum (10 s)"),
        # 220 requests a trial hold at most 110 in flight as a closed loop (it tried 494 and reported
        # an "offered rate" of 8,600 req/s for requests that all left at once).
        (["--load", "concurrency", "--max-load", "494"], "--max-load: concurrency 494 is above 110"),
        (["--workers", "0"], "--workers: must be an integer >= 1"),
        (["--workers", "999"], "--workers 999: must be from 1 to "),
        # Once a search of no trial that said "not met at any load tried" (exit 1).
        (["--time-budget", "5"], "--time-budget: 5 s is below one trial's minimum (10 s)"),
        # Workload flags are read before the target is asked anything (http://127.0.0.1:9 answers nothing).
        (["--turns", "0"], '--turns: fixed: field "value" (0) is below "min" (1)'),
        (["--prompt-tokens", "uniform:low=0,high=0"], '--prompt-tokens: uniform: field "high" (0) is below'),
        # 0 was read as "not given": the preset's own filter ran, and said so.
        (["--max-output-tokens", "0"], "--max-output-tokens must be >= 1 token, got 0"),
        (["--max-prompt-tokens", "0"], "--max-prompt-tokens must be >= 1 token, got 0"),
        # The most the daemon's config could allow (a trial of 10^7 requests was planned in memory).
        # In its own words: it once named the daemon's keys (jobs.limits.max_trials), which it has none of.
        (
            ["--requests-per-trial", "10000000"],
            "--requests-per-trial: --requests-per-trial + --warmup-requests = 10000020 exceeds the most "
            "requests a trial may send (1000000)",
        ),
        (["--max-trials", "1000"], "--max-trials: 1000 exceeds the most trials a search may run (100)"),
        # Each once ignored without a word: the tier for the deadline, the arrivals of a closed loop.
        (
            ["--decode-tier", "strict", "--decode-deadline", "0.1"],
            "--decode-tier: give either --decode-tier (a tier: strict, medium, relaxed) or --decode-deadline "
            "(a deadline of its own), not both",
        ),
        (
            ["--load", "concurrency", "--arrival", "gamma:shape=0.5"],
            "--arrival: only a rate search (--load rate) has arrivals; a concurrency search keeps its "
            "requests in flight, so drop --arrival",
        ),
        (["--turns", "trace"], "--turns trace: only bench replays a trace's turns; give N or a distribution"),
        # Once accepted: a negative cost printed, or (a price alone) no cost at all, without a word.
        (["--gpus", "0"], "--gpus: must be a number > 0, got 0"),
        (["--gpus", "1", "--gpu-hour-price", "-1"], "--gpu-hour-price: must be a number >= 0, got -1"),
        (
            ["--gpu-hour-price", "2"],
            "--gpu-hour-price: needs --gpus: the price is per GPU-hour, so without it nothing is priced",
        ),
        (
            ["--url", "localhost:18000"],
            '--url: must be an http(s) URL like http://host:8000, got "localhost:18000"',
        ),
    ],
)
def test_bad_flags_fail_before_any_load(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["capacity", "--url", "http://127.0.0.1:9", *flags]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "command",
    [["capacity", "--no-plots"], ["profile", "--lengths", "128"], ["bench", "--requests", "1"]],
)
def test_a_target_that_does_not_answer_is_an_error_not_a_traceback(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    assert main([*command, "--url", url, "--output", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert f"fluidity-exporter {command[0]}: error: the target did not answer: GET {url}/v1/models" in err
    assert "Traceback" not in err


class _Answers(http.server.BaseHTTPRequestHandler):
    """Answers every GET with the status its path's last part names (``/x/v1/models`` reads 404)."""

    def do_GET(self) -> None:
        status = int(self.path.split("/")[1]) if self.path.split("/")[1].isdigit() else 404
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:  # not on the test's stderr
        pass


@pytest.fixture
def answering_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/wrong", "answered GET {url}/wrong/v1/models with 404 Not Found: is the URL's path right?"),
        ("/401", "answered GET {url}/401/v1/models with 401 Unauthorized: is the API key right?"),
        ("/500", "answered GET {url}/500/v1/models with 500 Internal Server Error"),
    ],
)
@pytest.mark.parametrize("command", [["profile", "--lengths", "128"], ["bench", "--requests", "1"]])
def test_a_target_that_answers_an_error_status_is_not_said_to_be_silent(
    answering_url: str,
    command: list[str],
    path: str,
    said: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A 404 was reported as "the target did not answer", which sends a user looking for a dead server."""
    assert main([*command, "--url", answering_url + path, "--output", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert f"fluidity-exporter {command[0]}: error: the target {said.format(url=answering_url)}" in err
    assert "did not answer" not in err


@pytest.mark.parametrize(
    ("command", "existing"),
    [(["capacity", "--no-plots"], "out/capacity.json"), (["profile", "--lengths", "128"], "out")],
)
def test_an_earlier_result_is_kept_unless_forced(
    command: list[str], existing: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    earlier = tmp_path / existing
    earlier.parent.mkdir(parents=True, exist_ok=True)
    earlier.write_text("earlier result\n")
    url = f"http://127.0.0.1:{free_port()}"  # refused before any load: nothing needs to listen
    assert main([*command, "--url", url, "--output", str(tmp_path / "out")]) == 2
    assert f"{earlier} exists (an earlier result); choose another --output, or add --force" in (
        capsys.readouterr().err
    )
    assert earlier.read_text() == "earlier result\n"


def test_capacity_writes_to_a_fresh_timestamped_folder_and_says_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    flags = ["--sim-preset", "tiny", "--prompt-tokens", "fixed:32", "--output-tokens", "fixed:8"]
    flags += ["--start", "20", "--max-trials", "1", "--requests-per-trial", "10", "--warmup-requests", "0"]
    code = main(["capacity", *flags, "--no-plots"])
    (folder,) = (tmp_path / "capacity-results").iterdir()
    assert_capacity_measured(code, folder)
    assert (folder / "capacity.json").is_file()
    assert f"wrote capacity-results/{folder.name}/capacity.json" in capsys.readouterr().err


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]], ids=["in process", "over two workers"])
def test_a_target_that_fails_with_the_engine_idle_ends_not_met_after_that_trial(
    tmp_path: Path, workers: list[str]
) -> None:
    """A 1 ms prefill deadline no request meets even alone: at 4 req/s the tiny engine serves each
    before the next comes. The search once went on down to its floor (0.022 req/s here, a trial of 15
    minutes; seen live: 4 -> 0.067 req/s, still running after 600 s). Over workers too: a daemon's
    job runs its load in a worker process."""
    out = tmp_path / "out"
    flags = ["--sim-preset", "tiny", "--prompt-tokens", "fixed:64", "--output-tokens", "fixed:4"]
    flags += ["--prefill-deadline", "0.001", "--start", "4", "--requests-per-trial", "20"]
    flags += ["--warmup-requests", "0", "--max-trials", "4", *workers]
    main(["capacity", *flags, "--output", str(out), "--no-plots"])  # exit 1 if a busy machine's timings
    result = json.loads((out / "capacity.json").read_text())
    assert result["state"] == "not_met" and len(result["trials"]) == 1
    assert result["stopped_by"].startswith("floor: fails with the engine idle: at 4 req/s")
    alone = result["trials"][0]["figures"]["alone"]
    assert alone["missed"] == alone["requests"] >= 2 and alone["verdict"] == "fail"


@pytest.mark.parametrize(
    ("flags", "warned"),
    [
        (
            ["--requests-per-trial", "40"],
            "give --requests-per-trial 123 or more",
        ),  # 368 at p99, 3 trials a load
        (["--requests-per-trial", "123"], None),
        (["--requests-per-trial", "40", "--percentile", "90"], None),  # 36 confirm p90
    ],
)
def test_a_trial_too_small_to_confirm_the_percentile_is_warned_of_before_the_run(
    flags: list[str], warned: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """40 requests a trial once answered "at least 21.75 req/s" where a trial of 200 failed at 11.27,
    without a word before the run. (Refused by the target that answers nothing, after the warning.)"""
    url = f"http://127.0.0.1:{free_port()}"
    main(["capacity", "--url", url, "--no-plots", "--output", "/nonexistent/never", *flags])
    err = capsys.readouterr().err
    if warned is None:
        assert "cannot confirm" not in err
    else:
        assert "warning: --requests-per-trial: 40 requests a trial cannot confirm p99: that takes 368" in err
        assert warned in err


def test_a_search_given_no_start_looks_first_and_says_how_long_it_should_take(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The default started at 1 req/s whatever the target: on the simulator's 8B model a first trial
    of 224 s and a search of 7-9 minutes, with no estimate shown."""
    out = tmp_path / "out"
    flags = ["--sim-preset", "tiny", "--prompt-tokens", "fixed:64", "--output-tokens", "fixed:8"]
    flags += ["--max-trials", "1", "--requests-per-trial", "20", "--warmup-requests", "0"]
    main(["capacity", *flags, "--output", str(out), "--no-plots"])  # exit 1 if a busy machine's timings
    err = capsys.readouterr().err
    result = json.loads((out / "capacity.json").read_text())
    look = result["first_look"]
    assert look["completed"] == 32 and look["rate"] > 1.0 and look["tokens"] > 0
    start = result["trials"][0]["load"]
    assert start >= 2 * look["rate"] * 0.99 or not look["passed"]  # past a pass by its headroom
    assert f"first look: 32 requests, 16 in flight, served {look['rate']:.3g} req/s" in err
    assert re.search(
        rf"search from {start:.4g} req/s, about \d+ s expected over ~1 trials, at most \d+ s", err
    )
