"""The peers' searches in bench/capacity_bench.py follow their algorithms: Etalon's capacity search as its
code runs it, GuideLLM's goodput search (double from the start, then bisect to 10%) and AIPerf's
monotonic search (exponential probe, bisection, two agreeing trials per verdict), as documented; and the
oracle, which knows the sweep, runs the fewest trials that end the search."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

from exporter.jobs.trial_verdict import TrialReport

BENCH = Path(__file__).resolve().parents[2] / "bench" / "capacity_bench.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("capacity_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["capacity_bench"] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Objective:
    required: float = 0.99


@dataclass
class FakeBed:
    """Passes at or below ``capacity``; ``flip`` lists (load, part) whose verdict is the other one."""

    capacity: float
    flip: set[tuple[float, int]] = field(default_factory=set)
    slo: Objective = field(default_factory=Objective)
    calls: list[tuple[float, int]] = field(default_factory=list)
    swept: dict[float, bool] = field(default_factory=dict)  # the sweep's verdicts, for the oracle

    def trial(self, load: float, early_stop: bool, part: int = 0) -> TrialReport:
        self.calls.append((load, part))
        passed = (load <= self.capacity) != ((load, part) in self.flip)
        fluid = 200 if passed else 150
        figures = {"requests": 200, "fluid_requests": fluid, "objectives": [], "goodput": {"met": None}}
        return TrialReport(0, load, passed, "pass" if passed else "slo", 1.0, figures, 200, 10.0, 1000)


def test_guidellm_doubles_then_bisects_to_ten_percent(bench: ModuleType) -> None:
    bed = FakeBed(capacity=10.0)
    run = bench.guidellm(bed, 1.0)
    loads = [load for load, _ in bed.calls]
    assert loads[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]  # doubling to the first failure
    assert loads[5:] == [12.0, 10.0, 11.0]  # bisection of [8, 16] until within 10% of the top
    assert run.capacity == 10.0 and (11.0 - 10.0) <= 0.10 * 11.0
    assert all(part == 0 for _, part in bed.calls)  # one trial per load, followed by its point verdict
    assert run.state == "flagged"  # 200/200 cannot vouch for 99% at 95% (Wilson): flagged inconclusive


def test_aiperf_needs_two_agreeing_trials_per_verdict(bench: ModuleType) -> None:
    bed = FakeBed(capacity=10.0, flip={(4.0, 0)})  # the first trial at 4 fails by chance
    run = bench.aiperf(bed, 1.0)
    at_four = [part for load, part in bed.calls if load == 4.0]
    assert at_four == [0, 1, 2]  # disagreement: a third trial decides
    assert [part for load, part in bed.calls if load == 1.0] == [0, 1]  # two agreeing: done
    assert run.capacity is not None and 10.0 / 1.05 <= run.capacity <= 10.0
    visited = list(dict.fromkeys(load for load, _ in bed.calls))
    assert visited[:5] == [1.0, 2.0, 4.0, 8.0, 16.0]  # exponential probe to the first failure
    assert visited[5:7] == [12.0, 10.0]  # then bisection


def test_etalon_bisects_as_its_code_does(bench: ModuleType) -> None:
    bed = FakeBed(capacity=10.0)
    run = bench.etalon(bed, 1.0)
    loads = [load for load, _ in bed.calls]
    # [0, 2]; passes above 0.8x the top double it (1.75 -> 4, 3.44 -> 8, 6.86 -> 16); midpoints rounded
    # to two decimals (2.875 -> 2.88, 9.145 -> 9.14); a pass at 10.0 above 0.8 x 10.29 does not raise
    # the top past the lowest failure.
    assert loads == [1.0, 1.5, 1.75, 2.88, 3.44, 5.72, 6.86, 11.43, 9.14, 10.29, 9.71, 10.0, 10.14]
    assert run.capacity == 10.0 and all(part == 0 for _, part in bed.calls)


def test_etalon_stops_on_the_last_load_tried_not_the_top(bench: ModuleType) -> None:
    bed = FakeBed(capacity=10.0)
    run = bench.etalon(bed, 7.78)
    loads = [load for load, _ in bed.calls]
    # After the pass at 9.96, [9.96, 10.21] is within 2.5% of the top (0.25 < 0.255) but not of the
    # load just tried (0.249): Etalon's code tries 10.09 before it stops.
    assert loads == [7.78, 11.67, 9.72, 10.7, 10.21, 9.96, 10.09]
    assert run.capacity == 9.96


def test_etalon_reads_a_load_it_tried_before_back_instead_of_running_it(bench: ModuleType) -> None:
    # At 0.01 req/s steps the rounded midpoint of [0.01, 0.02] is 0.01 again (not the last load tried,
    # 0.02): Etalon finds that run's results in its folder, named after the load, and pays no trial.
    bed = FakeBed(capacity=0.01)
    run = bench.etalon(bed, 1.0)
    assert [load for load, _ in bed.calls] == [1.0, 0.5, 0.25, 0.12, 0.06, 0.03, 0.01, 0.02]
    assert len(run.trials) == 8 and run.capacity == 0.01


@pytest.mark.parametrize(
    ("start", "loads"),
    [
        (1.0, [1.0, 10.0, 10.4]),  # a pass far below: the truth, then the highest failure within 5%
        (10.0, [10.0, 10.4]),  # the start is the truth: only the failure is left
        (10.3, [10.3, 10.0]),  # a failure within 5% above the truth: only the pass is left
        (25.0, [25.0, 10.0, 10.4]),  # a failure far above bounds nothing the search can end on
    ],
)
def test_oracle_runs_the_fewest_trials_that_end_the_search(
    bench: ModuleType, start: float, loads: list[float]
) -> None:
    bed = FakeBed(capacity=10.0, swept={9.9: True, 10.0: True, 10.1: False, 10.4: False, 10.6: False})
    run = bench.oracle(bed, start)
    assert [load for load, _ in bed.calls] == loads
    assert run.capacity == 10.0
