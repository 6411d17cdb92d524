"""How a one-shot run's (``bench``, ``capacity``, ``profile``) flags are read into typed options.

The command line and a ``--config`` YAML file give one flat mapping of raw flag values, whose keys are the
flags' names with underscores (``max_prompt_tokens`` for ``--max-prompt-tokens``); a flag not given is
None. Each command reads it once, at the command line's edge, into frozen dataclasses of plain values
(``bench_options``, ``capacity_options``, ``profile_options``, from the groups in ``target_flags``,
``workload_flags``, ``load_flags`` and ``evaluation_flags``); every message names the flag, so the person
at the terminal knows what to change, and ``FlagReading`` reports every bad flag of a command together.

``read_flags`` reads flag values with the reader the daemon config and the jobs API use (``read_slo``...):
the values are put in the config's shape, and each problem's path is turned into the flag that gave the
value, so ``--percentile 150`` and ``slos.default.percentile: 150`` fail with the same message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias, TypeVar

from exporter.settings.cpus import available_cpus
from exporter.settings.problems import Problem, Problems, SettingsError
from exporter.settings.reader import Section

T = TypeVar("T")
_INDEX = re.compile(r"\[\d+\]")
# Raw flag values: the flags' names with underscores, a flag not given None (``exporter.cli.flags``).
RawFlags: TypeAlias = Mapping[str, Any]


class FlagReading:
    """The readers of a command's flag groups run in turn, each problem kept, then one error for all:
    a command with two bad flags says both at once, not one per try."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def __call__(self, reader: Callable[[], T]) -> T | None:
        """What ``reader`` read, or None when it raised (its problems kept for ``done``)."""
        try:
            return reader()
        except SettingsError as exc:
            self.messages.extend(exc.problems)
            return None

    def done(self) -> None:
        """Raises ``SettingsError`` with every problem found, in the order found, when there was one."""
        if self.messages:
            raise SettingsError("; ".join(self.messages))


def given(**values: Any) -> dict[str, Any]:
    """The values given (a flag not given is None and left out, so the reader's default holds)."""
    return {key: value for key, value in values.items() if value is not None}


def checked_workers(workers: int | None) -> int:
    """``--workers``: 1 when not given, else from 1 to the CPUs this process may use. Each worker is a
    busy client process; past the CPUs they share them and stamp their timings late, and an unbounded
    count forked hundreds of processes (``--workers 999``: a load average of 140)."""
    if workers is None:
        return 1
    cpus = available_cpus()
    if not 1 <= workers <= cpus:
        raise SettingsError(
            f"--workers {workers}: must be from 1 to {cpus}, the CPUs this process may use "
            "(its affinity and cgroup quota; one busy client process each)"
        )
    return workers


def json_object(text: str | Mapping[str, Any], flag: str) -> dict[str, Any]:
    """A JSON object given as text (a flag) or as a mapping already (a ``--config`` file's key)."""
    if isinstance(text, Mapping):
        return dict(text)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{flag}: not valid JSON ({exc.msg})") from exc
    if not isinstance(value, dict):
        raise SettingsError(f"{flag}: expected a JSON object")
    return value


def read_flags(
    raw: Mapping[str, Any], keys: Iterable[str], read: Callable[[Section], T], flags: Mapping[str, str]
) -> T:
    """``read`` over ``raw`` (flag values in the config's shape, absent ones left out); raises
    ``SettingsError`` with every problem, each under the flag ``flags`` names for its config path."""
    problems = Problems()
    value = read(Section(raw, "", problems, keys))
    if problems:
        raise SettingsError("; ".join(flag_problem(problem, flags) for problem in problems.items))
    return value


def flag_problem(problem: str, flags: Mapping[str, str]) -> str:
    """``"objectives[1]: unknown SLO..."`` as ``"--objective: unknown SLO..."``; the settings a
    ``Problem`` mentions are named by their flags too (``or give --decode-deadline``)."""
    if isinstance(problem, Problem):
        message = Problem.message(problem.template, problem.mentions, lambda path: flag_of(path, flags))
        part = problem.part or ""
        where = flags[part] if part in flags else flag_of(problem.path, flags)
        # A problem of the flags together (at the top level, or where ``flags`` names no flag) names
        # them in its message already.
        return f"{where}: {message}" if problem.path and where else message
    path, _, message = problem.partition(": ")
    return f"{flag_of(path, flags)}: {message}"


def flag_of(path: str, flags: Mapping[str, str]) -> str:
    """The flag of a config path: the longest prefix ``flags`` names, then the rest of the path (a
    mapping's key stays, a list's index goes: a repeated flag's values are not numbered on the line)."""
    for prefix in sorted(flags, key=len, reverse=True):
        if path == prefix or path.startswith((f"{prefix}.", f"{prefix}[")):
            return flags[prefix] + _INDEX.sub("", path[len(prefix) :])
    return f"--{path.replace('_', '-')}"
