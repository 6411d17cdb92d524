"""Problems found while reading options: ``path: message`` lines that keep their parts.

A config's reader records each problem under its path (``modules.m.arrival``); the command line shows
the same message under the flag that gave the value (``exporter.settings.oneshot.flag_problem``). A
``Problem`` keeps what that renaming needs: its path, the settings its message names (``mentions``), and
the part of a one-value spec that is wrong (``part``, from a ``SpecError``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class Problem(str):
    """One ``path: message`` line that keeps its parts, so the command line can name its flags in it.

    A message that names other settings (``or give decode_deadline_s``) holds a ``{}`` for each and
    their config paths in ``mentions``: as a line it names each by its key, and ``oneshot.flag_problem``
    names each by its flag, as it does the path. ``part`` is the path of the part of a value given as
    one spec that is wrong (``arrival.rate`` of ``poisson:rate=0``), where flags give the parts apart.
    """

    path: str
    template: str
    mentions: tuple[str, ...]
    part: str | None

    def __new__(
        cls, path: str, template: str, mentions: tuple[str, ...] = (), part: str | None = None
    ) -> Problem:
        line = super().__new__(cls, f"{path or '(top level)'}: {cls.message(template, mentions, _key)}")
        line.path, line.template, line.mentions, line.part = path, template, mentions, part
        return line

    @staticmethod
    def message(template: str, mentions: tuple[str, ...], name: Callable[[str], str]) -> str:
        """The message with each mentioned setting called ``name(path)``."""
        return template.format(*map(name, mentions)) if mentions else template

    def __reduce__(self) -> tuple[Any, ...]:
        return (Problem, (self.path, self.template, self.mentions, self.part))


class SettingsError(ValueError):
    """Bad settings, the one error of every reader (the daemon's YAML, a jobs API request, the flags, the
    simulator's options): ``problems`` holds one ``path: message`` line per problem, each a ``Problem``
    (whose ``path`` names the field) where a tree was read; one message is one problem."""

    def __init__(self, problems: str | Sequence[str]) -> None:
        items = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(items))
        self.problems = items


class SpecError(SettingsError):
    """A bad part of a value given as one spec (``poisson:rate=0``): ``part`` names it (``rate``); the
    reader of the whole value says it under the value's path."""

    def __init__(self, message: str, part: str) -> None:
        super().__init__(message)
        self.part = part


def literal(text: str) -> str:
    """``text`` (a value given) for a message that mentions settings: its braces are not placeholders."""
    return text.replace("{", "{{").replace("}", "}}")


def _key(path: str) -> str:
    """A mentioned setting as a config message names it: its key (a sibling of the bad value's)."""
    return path.rpartition(".")[2]


class Problems:
    """Every problem found, in the order found, as ``path: message`` lines."""

    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, path: str, message: str, mentions: tuple[str, ...] = (), part: str | None = None) -> None:
        """A problem at ``path``; ``mentions``: the config paths of the settings its ``{}`` name;
        ``part``: the path of the wrong part of a spec (``Problem``)."""
        self.items.append(Problem(path, message, mentions, part))

    def __bool__(self) -> bool:
        return bool(self.items)
