"""Multi-turn sessions: think-time specs, sessions drawn by a workload, the turns the runner sends (with
the answers verbatim), and live against the simulator: follow-up turns hit its prefix cache and their
TTFT is lower than a cold prompt's."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from exporter.load.plan import LoadPlan
from exporter.load.runner import RunHooks, run_plan
from exporter.load.sessions import run_session
from exporter.load.workloads import IndependentLengths, Workload
from exporter.probe.client import ProbeClient
from exporter.settings.lengths import Fixed
from exporter.settings.target import TargetSettings
from exporter.settings.think_time import parse_think_time
from exporter.sim import tokenizer
from exporter.streams.request import FollowUp, RequestSpec, Timeouts
from exporter.streams.result import Outcome, ProbeResult
from tests.support.sim import StartSim
from tests.support.wait import wait_for

RNG = np.random.default_rng


@pytest.mark.parametrize(
    ("spec", "describe", "mean"),
    [
        ("2", "fixed:value=2", 2.0),
        (0, "fixed:value=0", 0.0),
        ("fixed:0.5", "fixed:value=0.5", 0.5),
        ("uniform:low=1,high=3", "uniform:low=1,high=3", 2.0),
        ({"kind": "exponential", "mean": 4}, "exponential:mean=4", 4.0),
        ("lognormal:median=10,sigma=0.8,max=120", "lognormal:median=10,sigma=0.8,max=120", 13.8),
    ],
)
def test_think_time_specs(spec: Any, describe: str, mean: float) -> None:
    think = parse_think_time(spec)
    assert think.describe() == describe
    values = think.sample(20_000, RNG(1))
    assert values.min() >= 0 and abs(values.mean() - mean) <= 0.05 * mean + 1e-9


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "gamma:shape=2",
            'unknown think-time distribution "gamma"; valid: fixed, uniform, exponential, lognormal',
        ),
        ("uniform:low=3", "uniform think time needs low, high (and optionally max), got 'uniform:low=3'"),
        ("uniform:low=3,high=1", "uniform think time: low must be <= high, got 'uniform:low=3,high=1'"),
        ("fixed:-1", "think time fixed.value: expected seconds >= 0, got '-1'"),
        ("lognormal:median=x,sigma=1", "think time lognormal.median: expected seconds, got 'x'"),
        # No ceiling held a run for ever (bench hung until killed).
        ("fixed:1e300", "think time fixed.value: at most 86400 seconds (a day), got '1e300'"),
        # YAML keys may be numbers: sorting them beside names raised a TypeError (a traceback).
        (
            {"kind": "fixed", 1: 2, "b": 3},
            "fixed think time needs value (and optionally max), got {'kind': 'fixed', 1: 2, 'b': 3}",
        ),
    ],
)
def test_think_time_errors(spec: Any, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_think_time(spec)
    assert str(caught.value) == message


def _workload(**fields: Any) -> Workload:
    base: dict[str, Any] = {
        "name": "w",
        "lengths": IndependentLengths(Fixed(100), Fixed(20)),
        "turns": Fixed(3),
        "followup_lengths": IndependentLengths(Fixed(10), Fixed(5)),
        "think_time": parse_think_time("fixed:0.25"),
    }
    return Workload(**(base | fields))


def test_a_session_workload_sends_n_requests_in_all() -> None:
    specs = _workload().sample(7, RNG(0))
    assert [1 + len(s.followups) for s in specs] == [3, 3, 1]  # the last session is cut short
    first = specs[0]
    assert first.prompt_tokens == 100 and first.max_tokens == 20
    assert [(f.content_tokens, f.max_tokens, f.think_s) for f in first.followups] == [(10, 5, 0.25)] * 2
    texts = [f.content for s in specs for f in s.followups] + [s.prompt for s in specs]
    assert len(set(texts)) == len(texts)  # every message is new: no accidental prefix hits
    assert len(_workload().sample_sessions(4, RNG(0))) == 4


def test_a_conversation_stops_before_its_prompt_would_pass_the_filter() -> None:
    # 100 + 20 + 16, then each follow-up adds 10 + 16 to the prompt, and its answer 5 + 16 after it.
    specs = _workload(turns=Fixed(10), max_prompt_tokens=250).sample_sessions(1, RNG(0))
    assert len(specs[0].followups) == 2  # prompts of 162 and 209 fit; the third's, 256, does not
    context = 100 + 20 + 16
    for _ in specs[0].followups:
        context += 10 + 16
        assert context <= 250
        context += 5 + 16


def test_a_conversation_stops_before_its_prompt_and_answer_would_pass_the_context() -> None:
    # Prompts of 162, 209 and 256 with answers of 5: the second follow-up needs 214 tokens, over 212.
    specs = _workload(turns=Fixed(10), max_total_tokens=212).sample_sessions(1, RNG(0))
    assert len(specs[0].followups) == 1


def test_tool_calls_need_a_message_api() -> None:
    with pytest.raises(ValueError, match="tool calls need api chat or responses, not completions"):
        _workload(api="completions", tool_calls=True)


class FakeTarget:
    """Answers every request with ``answer`` after ``delay`` s; fails the turns listed in ``fail``."""

    def __init__(self, delay: float = 0.01, fail: tuple[int, ...] = ()) -> None:
        self.delay = delay
        self.fail = fail
        self.sent: list[RequestSpec] = []
        self.answered = 0

    async def send(self, spec: RequestSpec, at: float | None) -> ProbeResult:
        self.sent.append(spec)
        loop = asyncio.get_running_loop()
        result = ProbeResult(api="chat", session=spec.session, turn=spec.turn, sent_at=loop.time())
        await asyncio.sleep(self.delay)
        result.finished_at = loop.time()
        self.answered += 1
        if spec.turn in self.fail:
            result.outcome = Outcome.STREAM_ABORTED
        else:
            result.output_text = f" answer{spec.turn}" if spec.keep_text else None
        return result


async def _wait_until(deadline: float) -> None:
    await asyncio.sleep(max(deadline - asyncio.get_running_loop().time(), 0))


def _session(turns: int, think: float = 0.0) -> RequestSpec:
    follow = tuple(FollowUp(f" q{k}", 4, 1, think) for k in range(2, turns + 1))
    return RequestSpec(" q1", 4, messages=(("user", " q1"),), request_id="s1", followups=follow)


async def test_each_turn_sends_the_conversation_with_the_answers_verbatim() -> None:
    target = FakeTarget()
    loop = asyncio.get_running_loop()
    sent = await run_session(target.send, _session(3, think=0.05), loop.time(), _wait_until, loop.time)
    assert [s.turn for s, _ in sent] == [1, 2, 3] and {s.session for s, _ in sent} == {"s1"}
    assert target.sent[2].messages == (
        ("user", " q1"),
        ("assistant", " answer1"),
        ("user", " q2"),
        ("assistant", " answer2"),
        ("user", " q3"),
    )
    assert [s.keep_text for s in target.sent] == [True, True, False]  # the last answer is not re-sent
    gap = sent[1][1].sent_at - sent[0][1].finished_at  # type: ignore[operator]
    assert 0.05 <= gap < 0.15  # the think time, counted from the end of the previous answer


async def test_completions_conversations_are_one_growing_text() -> None:
    target = FakeTarget()
    first = RequestSpec(" p", 4, request_id="s", followups=(FollowUp(" next", 4),))
    loop = asyncio.get_running_loop()
    await run_session(target.send, first, loop.time(), _wait_until, loop.time)
    assert target.sent[1].prompt == " p answer1 next" and target.sent[1].messages is None


async def test_a_failed_turn_ends_its_session() -> None:
    target = FakeTarget(fail=(2,))
    loop = asyncio.get_running_loop()
    sent = await run_session(target.send, _session(4), loop.time(), _wait_until, loop.time)
    assert [r.outcome for _, r in sent] == [Outcome.OK, Outcome.STREAM_ABORTED]


async def test_the_runner_schedules_sessions_and_returns_every_turn() -> None:
    target = FakeTarget()
    loop = asyncio.get_running_loop()
    seen: list[int] = []
    run = await run_plan(
        target.send,
        LoadPlan([_session(3), _session(1), _session(2)], offsets=[0.0, 0.01, 0.02]),
        RunHooks(clock=loop.time, on_result=lambda r: seen.append(r.turn)),
    )
    assert len(run.results) == len(run.specs) == 6 and sorted(seen) == [1, 1, 1, 2, 2, 3]
    assert [(s.turn, r.turn) for s, r in zip(run.specs, run.results, strict=True)] == [
        (1, 1), (2, 2), (3, 3), (1, 1), (1, 1), (2, 2)
    ]  # fmt: skip


async def test_cancelling_the_run_ends_its_sessions() -> None:
    target = FakeTarget()
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(
        run_plan(target.send, LoadPlan([_session(5, think=10.0)], concurrency=1), RunHooks(clock=loop.time))
    )
    await wait_for(lambda: target.answered == 1)  # the session is now in its 10 s think time
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(target.sent) == 1  # the session died in its think time


# -- live: the simulator's prefix cache serves the follow-ups ---------------------------------------

# A prefill cost large enough that skipping 2,000 cached tokens shows in TTFT (about 50 ms cold).
COST = {"prefill_per_token_s": 2e-5, "attn_per_pair_s": 2e-9}


async def test_live_sessions_hit_the_prefix_cache_and_answer_follow_ups_faster(start_sim: StartSim) -> None:
    server = await start_sim(cost=COST, max_model_len=8192)
    workload = _workload(
        lengths=IndependentLengths(Fixed(2000), Fixed(16)),
        followup_lengths=IndependentLengths(Fixed(40), Fixed(16)),
        think_time=parse_think_time("fixed:0.02"),
    )
    settings = TargetSettings(base_url=server.url, timeouts=Timeouts(ttft=5, idle=5, total=10))
    async with ProbeClient(settings) as client:
        # One session at a time: a follow-up never queues behind another session's cold prefill.
        run = await run_plan(client.send, LoadPlan(workload.sample(9, RNG(3)), concurrency=1))
        cold = await client.send(workload.with_options(api="chat").sample(1, RNG(4))[0])
    assert all(r.ok for r in run.results) and len(run.results) == 9
    firsts = [r for r in run.results if r.turn == 1]
    follow = [r for r in run.results if r.turn > 1]
    assert len(firsts) == 3 and len(follow) == 6
    assert all(r.prompt_tokens_cached == 0 for r in firsts)
    for r in follow:  # everything but the new message (and the partial last block) came from the cache
        assert r.prompt_tokens_reported is not None and r.prompt_tokens_cached is not None
        assert r.prompt_tokens_reported - 16 - 40 - 16 <= r.prompt_tokens_cached < r.prompt_tokens_reported
    assert server.engine.cache_hits == sum(r.prompt_tokens_cached or 0 for r in [*run.results, cold])

    def ttft(r: ProbeResult) -> float:
        assert r.sent_at is not None
        return r.token_times[0] - r.sent_at

    # A cold 2,000-token prompt takes ~45 ms of prefill; a follow-up of ~2,100 tokens only its ~80 new.
    assert max(ttft(r) for r in follow) < ttft(cold) - 0.02
    assert tokenizer.count_chat_tokens([{"role": "user", "content": "x"}]) > 0
