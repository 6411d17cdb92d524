"""The walk of issue 39 through one capacity search: the files of ``exporter.jobs`` a search enters.

Runs the ``capacity`` command in this process against the built-in simulator (small trials, so it
takes well under a minute) and records, in call order, every call from one file of ``exporter.jobs``
into another. Prints the files the search enters, its moves back into a file it had left (each
such move from one file into another counted once, however many trials repeat it) and the pairs of
files that call each other both ways. Measured with the search in 13 files of ``exporter/jobs``: 12
files entered, 27 distinct moves back, 5 pairs calling each other (most of them callbacks: a trial's
``send``, the drain, the budget, the progress hooks). With it gathered into 9 (the loop, its pure
state and steps, the engine model, a trial and its verdict, the result, the report, the runner and
the command's ``local_capacity``): 9 files entered, 23 distinct moves back (calls down into a module
entered before, as a layered design makes them), 2 pairs calling each other, both callbacks passed
down as values: the search's hooks and ``run_trial`` (capacity<->capacity_runner), and the command's
client and engine reading (capacity_runner<->local_capacity). The tracing slows the client, so the
run's own verdict (often "timings unreliable") is not printed: only the walk counts.

Usage: ``python bench/capacity_walk.py [--calls]`` from the repository root (``--calls``: every move,
in order, with the functions at both ends).
"""

from __future__ import annotations

import contextlib
import io
import sys
import tempfile
from types import FrameType
from typing import Any

from exporter.cli import main as cli_main

PACKAGE = "exporter.jobs"
FLAGS = (
    "--requests-per-trial", "30", "--warmup-requests", "4", "--max-trials", "3",
    "--no-plots", "--json", "--force",
)  # fmt: skip


class Walk:
    """Every call that crosses from one file of ``PACKAGE`` into another, as (caller, callee)."""

    def __init__(self) -> None:
        self.moves: list[tuple[str, str]] = []

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not _module(frame).startswith(PACKAGE) or frame.f_code.co_name == "<module>":
            return  # an import runs a module's body: not a step of the search
        caller = frame.f_back
        while caller is not None and not _module(caller).startswith("exporter."):
            caller = caller.f_back  # an event loop's callback, a dataclass's generated __init__
        if caller is None or not _module(caller).startswith(PACKAGE):
            return
        before, after = _where(caller), _where(frame)
        if before[0] != after[0]:
            self.moves.append((f"{before[0]}:{before[1]}", f"{after[0]}:{after[1]}"))

    def files(self) -> list[str]:
        """The files in the order the search first entered them."""
        seen = dict.fromkeys(part.split(":")[0] for move in self.moves for part in move)
        return list(seen)

    def returns(self) -> set[tuple[str, str]]:
        """The moves (caller's file, callee's file) that go back into a file entered before and left,
        each counted once however often a trial repeats it."""
        entered: set[str] = set()
        back: set[tuple[str, str]] = set()
        for before, after in self.moves:
            source, target = before.split(":")[0], after.split(":")[0]
            entered.add(source)
            if target in entered:
                back.add((source, target))
            entered.add(target)
        return back

    def both_ways(self) -> list[tuple[str, str]]:
        """Pairs of files each of which calls into the other."""
        edges = {(b.split(":")[0], a.split(":")[0]) for b, a in self.moves}
        return sorted((x, y) for x, y in edges if x < y and (y, x) in edges)


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", ""))


def _where(frame: FrameType) -> tuple[str, str]:
    return _module(frame).removeprefix(PACKAGE + "."), frame.f_code.co_qualname


def walk() -> Walk:
    recorded = Walk()
    with (
        tempfile.TemporaryDirectory() as output,
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
    ):
        sys.setprofile(recorded.profile)
        try:
            cli_main(["capacity", *FLAGS, "--output", output])
        except SystemExit:
            pass
        finally:
            sys.setprofile(None)
    return recorded


def main() -> None:
    recorded = walk()
    if "--calls" in sys.argv:
        for before, after in recorded.moves:
            print(f"  {before} -> {after}")
    files = recorded.files()
    print(f"files entered: {len(files)} ({', '.join(files)})")
    back = recorded.returns()
    print(f"moves back into a file left before: {len(back)} distinct, of {len(recorded.moves)} moves in all")
    pairs = recorded.both_ways()
    print(f"pairs calling each other: {len(pairs)} ({', '.join(f'{x}<->{y}' for x, y in pairs)})")


if __name__ == "__main__":
    main()
