"""The options of a one-shot run (``bench``, ``capacity``, ``profile``) and the error a bad one raises.

A run's options are one flat mapping whose keys are the flags' names with underscores (``max_prompt_tokens``
for ``--max-prompt-tokens``), as the command line and a ``--config`` YAML file give them alike; an option
not given is None. The modules that build a run's pieces from it (``exporter.load.target_options``,
``exporter.load.workload_options``, ``exporter.load.load_plan``, ``exporter.report.evaluation_options``)
name the flag in every message, so the person at the terminal knows what to change.

``read_flags`` reads flag values with the reader the daemon config and the jobs API use (``read_slo``...):
the values are put in the config's shape, and each problem's path is turned into the flag that gave the
value, so ``--percentile 150`` and ``slos.default.percentile: 150`` fail with the same message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeAlias, TypeVar

from exporter.settings.problems import Problem, Problems, SettingsError
from exporter.settings.reader import Section

T = TypeVar("T")
_INDEX = re.compile(r"\[\d+\]")

Options: TypeAlias = Mapping[str, Any]


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
