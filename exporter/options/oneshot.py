"""The options of a one-shot run (``bench``, ``capacity``, ``profile``) and the error a bad one raises.

A run's options are one flat mapping whose keys are the flags' names with underscores (``max_prompt_tokens``
for ``--max-prompt-tokens``), as the command line and a ``--config`` YAML file give them alike; an option
not given is None. The modules that build a run's pieces from it (``exporter.load.target_options``,
``exporter.load.workload_options``, ``exporter.load.load_plan``, ``exporter.report.evaluation_options``)
name the flag in every message, so the person at the terminal knows what to change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, TypeAlias

Options: TypeAlias = Mapping[str, Any]


class OptionError(ValueError):
    """A bad option, flag or file: the message names it and the valid options."""


def json_object(text: str | Mapping[str, Any], flag: str) -> dict[str, Any]:
    """A JSON object given as text (a flag) or as a mapping already (a ``--config`` file's key)."""
    if isinstance(text, Mapping):
        return dict(text)
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise OptionError(f"{flag}: not valid JSON ({exc.msg})") from exc
    if not isinstance(value, dict):
        raise OptionError(f"{flag}: expected a JSON object")
    return value
