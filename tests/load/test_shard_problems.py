"""Which shard problems make a run unfit to judge, and the protocol's pure parts: dealing and the codec."""

from __future__ import annotations

import json
import pickle

import pytest

from exporter.load.plan import LoadPlan
from exporter.load.shards.reports import ShardState, shard_problems
from exporter.load.shards.tasks import (
    ProtocolError,
    ShardEntry,
    ShardTask,
    deal_closed,
    deal_open,
    plan_tasks,
    result_from_json,
    result_to_json,
    split_concurrency,
    task_from_json,
    task_to_json,
)
from exporter.settings.shards import PoolSettings
from exporter.settings.target import TargetSettings
from exporter.streams.request import FollowUp, RequestSpec, Secret, Timeouts
from exporter.streams.result import Outcome, ProbeResult, TokenSource

SETTINGS = PoolSettings(max_start_lateness_s=0.1, max_unreliable_share=0.01)


def state(shard: int = 0, **fields: object) -> ShardState:
    defaults: dict[str, object] = {"ready": True, "done": True, "late_s": 0.002, "results": 100}
    return ShardState(shard, **{**defaults, **fields})  # type: ignore[arg-type]


def test_healthy_shards_have_no_problem() -> None:
    assert shard_problems([state(0), state(1, unreliable=1)], SETTINGS) == []  # 1% is the bound
    # One flagged result of a small shard's 5 is a stall, not saturation (the run's checks count it).
    assert shard_problems([state(0, results=5, unreliable=1)], SETTINGS) == []


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"late_s": 0.25}, "shard 0 started 0.250 s late (bound 0.1 s)"),
        ({"unreliable": 2}, "shard 0 was saturated: 2 of 100 results unreliable (bound 1%, and more than 1)"),
        (
            {"unreliable": 2, "results": 5},
            "shard 0 was saturated: 2 of 5 results unreliable (bound 1%, and more than 1)",
        ),
        (
            {"unreliable": 3, "results": 200},
            "shard 0 was saturated: 3 of 200 results unreliable (bound 1%, and more than 1)",
        ),
        ({"gone": "died: exit code -9", "done": False}, "shard 0 died: exit code -9"),
        ({"ready": False, "done": False, "late_s": None}, "shard 0 was not ready within 60 s"),
        ({"done": False}, "shard 0 did not report its end"),
    ],
)
def test_each_problem_is_named(fields: dict[str, object], problem: str) -> None:
    assert shard_problems([state(0, **fields)], SETTINGS) == [problem]


def test_open_loops_are_dealt_round_robin_by_due_time() -> None:
    assert deal_open([0.3, 0.1, 0.2, 0.0, 0.4], 2) == [[3, 2, 4], [1, 0]]
    assert deal_open([0.0] * 3, 5) == [[0], [1], [2], [], []]


@pytest.mark.parametrize(
    ("concurrency", "shards", "shares"),
    [(3, 2, [2, 1]), (4, 2, [2, 2]), (1, 3, [1, 0, 0]), (7, 3, [3, 2, 2])],
)
def test_concurrency_is_split_evenly(concurrency: int, shards: int, shares: list[int]) -> None:
    assert split_concurrency(concurrency, shards) == shares
    assert sum(split_concurrency(concurrency, shards)) == concurrency


def test_closed_loops_deal_requests_in_proportion_to_slots() -> None:
    dealt = deal_closed(12, [2, 1, 0])
    assert [len(d) for d in dealt] == [8, 4, 0]
    assert sorted(i for d in dealt for i in d) == list(range(12))


def test_plan_tasks_leave_out_shards_with_nothing_to_do() -> None:
    specs = [RequestSpec(f"p{i}", 4) for i in range(3)]
    tasks = plan_tasks("r", TargetSettings("http://x"), LoadPlan(specs, [0.0, 0.1, 0.2]), 4)
    assert [t.shard for t in tasks] == [0, 1, 2]
    closed = plan_tasks("r", TargetSettings("http://x"), LoadPlan(specs, concurrency=1), 3)
    assert [(t.shard, t.concurrency, len(t.entries)) for t in closed] == [(0, 1, 3)]
    with pytest.raises(ValueError, match="exactly one of offsets"):
        plan_tasks("r", TargetSettings("http://x"), LoadPlan(specs), 2)


def test_a_task_round_trips_without_its_api_key() -> None:
    settings = TargetSettings(
        "http://x:8000", api="completions", model="m", api_key=Secret("sk-secret"), headers=(("X-A", "b"),),
        extra_body=(("top_p", 0.9),), timeouts=Timeouts(ttft=3.0),
    )  # fmt: skip
    spec = RequestSpec("hi", 8, 2, (("user", "hi"),), "id-1", (("sim", {"script": {"ttft": 0.1}}),))
    task = ShardTask("r1", 1, 2, settings, (ShardEntry(7, 0.25, spec),), None, 30.0)
    data = task_to_json(task)
    assert "sk-secret" not in repr(data)
    back = task_from_json(data, Secret("sk-own"))
    assert back.settings.api_key == Secret("sk-own")
    assert back == ShardTask("r1", 1, 2, TargetSettings(**{**vars(settings), "api_key": Secret("sk-own")}),
                             task.entries, None, 30.0)  # fmt: skip
    with pytest.raises(ProtocolError, match="run the same image version"):
        task_from_json({**data, "protocol": 99})


def test_a_result_round_trips_with_its_stamps_rebased() -> None:
    result = ProbeResult(
        "chat", Outcome.TRUNCATED, scheduled_at=100.0, sent_at=100.001, headers_at=100.01,
        token_times=[100.05, 100.07], token_counts=[1, 2], finished_at=100.08,
        token_source=TokenSource.CONTINUOUS_USAGE, unreliable=True, extra={"request_id": "r1"},
    )  # fmt: skip
    data = result_to_json(result, origin=99.0)
    assert data["scheduled_at"] == pytest.approx(1.0) and data["outcome"] == "truncated"
    back = result_from_json(data, origin=5.0)
    assert back.scheduled_at == pytest.approx(6.0) and back.token_times == pytest.approx([6.05, 6.07])
    assert (back.outcome, back.token_source, back.output_tokens, back.unreliable) == (
        Outcome.TRUNCATED, TokenSource.CONTINUOUS_USAGE, 3, True,
    )  # fmt: skip
    assert pickle.loads(pickle.dumps(back)) == back
    with pytest.raises(ProtocolError, match="malformed result"):
        result_from_json({**data, "outcome": "fine"}, 0.0)


def test_every_request_field_crosses_the_protocol() -> None:
    spec = RequestSpec(
        "hi", 8, 2, (("user", "hi"),), "id-1", (("top_p", 0.5),), tool_calls=True, session="s-1", turn=2,
        followups=(FollowUp("more", 4, 1, 2.5),), keep_text=True,
    )  # fmt: skip
    task = ShardTask("r", 0, 1, TargetSettings("http://x"), (ShardEntry(0, 0.0, spec),))
    assert task_from_json(json.loads(json.dumps(task_to_json(task)))).entries[0].spec == spec
