"""How long the default ``capacity`` takes to its answer, and how it ends, against another checkout.

Runs ``fluidity-exporter capacity`` as a user would (the embedded simulator, every default) from this
checkout and, with ``--against``, from another one (its root on ``PYTHONPATH``: the code before a
change), the arms alternating so that a machine that gets busier moves both alike. Printed per run:
the exit code, the wall time, the trials (and how many were set aside for timings the client
distrusted), how the trials after the first waited for a drained engine, and the answer's state;
then each arm's medians and the ratio of this checkout's median wall time to the other's.

Usage, on a quiet machine (issue 36's goal: the default answer in under 3 minutes)::

    python bench/default_capacity.py --runs 3 --against /path/to/other/checkout

About 3 minutes a run. A checkout without the built C reads (``exporter/probe/_reads*.so``) reads in
Python, at about twice the client's CPU: copy the module over when ``_reads.c`` is the same in both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

GOAL_S = 180.0  # issue 36: the default answer in under 3 minutes


@dataclass(frozen=True)
class Run:
    """One default ``capacity``: its exit code, wall seconds, trials (set aside among them), how the
    trials after the first found the engine drained, and the answer's state."""

    exit: int
    wall_s: float
    trials: int
    set_aside: int
    drained: str
    state: str | None

    def line(self) -> str:
        return (
            f"exit {self.exit}  wall {self.wall_s:.1f} s  trials {self.trials} (set aside {self.set_aside})  "
            f"drained {self.drained}  state {self.state}"
        )


def one_run(root: Path) -> Run:
    """The default ``capacity`` from the checkout at ``root``."""
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "exporter", "capacity", "--no-plots", "--output", out, "--force"]
        env = {**os.environ, "PYTHONPATH": str(root)}
        began = time.monotonic()
        code = subprocess.run(
            command, check=False, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        ).returncode
        wall = time.monotonic() - began
        path = Path(out) / "capacity.json"
        result = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"trials": []}
    trials = result["trials"]
    drains = Counter(str(t.get("drained_by")) for t in trials[1:])
    return Run(
        code, wall, len(trials), sum(t.get("set_aside") is not None for t in trials),
        ", ".join(f"{how} {n}" for how, n in sorted(drains.items())) or "-", result.get("state"),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs (per arm with --against)")
    parser.add_argument("--against", type=Path, help="another checkout's root: run it too, alternating")
    args = parser.parse_args()
    here = Path(__file__).resolve().parent.parent
    arms = {"this": here} if args.against is None else {"other": args.against.resolve(), "this": here}
    runs: dict[str, list[Run]] = {arm: [] for arm in arms}
    for rep in range(args.runs):
        for arm in list(arms) if rep % 2 == 0 else list(arms)[::-1]:
            load = os.getloadavg()[0]
            run = one_run(arms[arm])
            runs[arm].append(run)
            print(f"{arm:<6} run {rep + 1}: {run.line()}  load {load:.1f}", flush=True)
    medians = {arm: statistics.median(r.wall_s for r in arm_runs) for arm, arm_runs in runs.items()}
    for arm, arm_runs in runs.items():
        exits = sum(r.exit == 0 for r in arm_runs)
        trials = statistics.median(r.trials for r in arm_runs)
        under = sum(r.wall_s < GOAL_S for r in arm_runs)
        print(
            f"{arm:<6} exit 0 in {exits} of {len(arm_runs)}; median wall {medians[arm]:.1f} s, "
            f"{trials:g} trials; under {GOAL_S:.0f} s in {under} of {len(arm_runs)}"
        )
    if "other" in medians:
        print(f"wall time this/other: {medians['this'] / medians['other']:.3f}x (medians)")


if __name__ == "__main__":
    main()
