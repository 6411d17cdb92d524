"""Reading a parsed YAML tree with every problem recorded, each under its path, instead of raised.

``Problems`` (``exporter.settings.problems``) collects ``path: message`` lines. ``Section`` wraps one YAML mapping: it reports unknown keys
when it is opened and has typed getters that record a problem and return the default when a value is
wrong, so one pass over a config finds every problem (a config with any problem is never built, so the
defaults returned on error are never used).

``expand_env`` replaces ``${NAME}`` and ``${NAME:-default}`` in every string value (``$$`` is a literal
``$``) before the sections are read. A value produced by expansion is a ``Substituted`` string, and the
typed getters read it as YAML would read the scalar (``${PORT:-9468}`` can fill an integer; an empty
result or ``null`` is null), so numbers and booleans can come from the environment too.

Paths look like ``targets[1].timeouts.ttft`` and ``modules.chat-short.arrival``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from exporter.settings.problems import Problems, SpecError

T = TypeVar("T")

# The bound of a duration that has no tighter one (exporter.settings.bounds, which imports this module,
# holds the others): far above any sensible value, far below where timers and timedelta overflow.
MAX_DURATION_S = 366 * 86400.0

DURATION_HELP = "use seconds (a number) or a number with a unit: ms, s, m, h, d (e.g. 250ms, 30s, 5m, 1h)"
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|s|m|h|d)")
_LABEL_SAFE = re.compile(r"[A-Za-z0-9_.-]+")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_ENV = re.compile(
    r"\$(?:\$|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}|(?P<bad>\{[^}]*\}?))"
)


class Substituted(str):
    """A string value that came out of ``${...}`` expansion."""

    __slots__ = ()


class Unresolved(Substituted):
    """A string value whose expansion failed (already a problem): readers skip it without a word."""

    __slots__ = ()


class Context:
    """What every section reader shares: the problems, the config file's folder, the environment."""

    def __init__(self, problems: Problems, base_dir: Path | None, environ: Mapping[str, str]) -> None:
        self.problems = problems
        self.base_dir = base_dir
        self.environ = environ
        self.secret_files: list[str] = []  # every {file: PATH} read, for the config watch

    def secret_file(self, text: str) -> str:
        """``path(text)`` of a secret's file (``{file: PATH}``), remembered: the secret is read once, at
        load, so a rotated file takes effect only when the config is read again."""
        path = self.path(text)
        self.secret_files.append(path)
        return path

    def path(self, text: str) -> str:
        """``text`` relative to the config file's folder (unchanged when absolute or read from text)."""
        if self.base_dir is None or os.path.isabs(text):
            return text
        return str(self.base_dir / text)

    def existing_file(self, text: str) -> str:
        path = self.path(text)
        if not os.path.isfile(path):
            raise ValueError(f"file not found: {path}")
        return path

    def value(self, path: str, raw: Any, convert: Callable[[Any], T]) -> T | None:
        """``convert(raw)``, or None with a problem at ``path`` (None also for a failed expansion)."""
        if isinstance(raw, Unresolved):
            return None
        try:
            return convert(raw)
        except ValueError as exc:
            self.problems.add(path, str(exc))
            return None


def child_path(path: str, key: str | int) -> str:
    """``path.key`` or ``path[index]`` (a bare ``key`` at the top level)."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def show(value: Any) -> str:
    """A value as a message quotes it: strings quoted, containers by kind, null as null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, set | frozenset):  # YAML's !!set
        return "a set"
    return repr(value)


def resolve_scalar(value: Any) -> Any:
    """A ``Substituted`` string read as a YAML scalar (null, bool, int or float) where it is one."""
    if not isinstance(value, Substituted) or isinstance(value, Unresolved):
        return value
    try:
        loaded = yaml.safe_load(value)
    except yaml.YAMLError:
        return value
    return loaded if loaded is None or isinstance(loaded, bool | int | float) else value


def parse_duration(value: Any) -> float:
    """Seconds from a number or a string such as ``250ms``, ``30s``, ``5m``, ``1h`` or ``1h30m``."""
    value = resolve_scalar(value)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"bad duration {show(value)}; {DURATION_HELP}")
    if isinstance(value, str):
        text = value.strip()
        parts = _DURATION_PART.findall(text)
        if not text or "".join(number + unit for number, unit in parts) != text:
            raise ValueError(f"bad duration {show(value)}; {DURATION_HELP}")
        return sum(float(number) * _UNIT_S[unit] for number, unit in parts)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"bad duration {show(value)}; a duration is finite and >= 0")
    return float(value)


def expand_env(tree: Any, environ: Mapping[str, str], problems: Problems, path: str = "") -> Any:
    """``tree`` with ``${NAME}`` / ``${NAME:-default}`` expanded in every string value (not in keys)."""
    if isinstance(tree, Mapping):
        return {k: expand_env(v, environ, problems, child_path(path, str(k))) for k, v in tree.items()}
    if isinstance(tree, list):
        return [expand_env(v, environ, problems, child_path(path, i)) for i, v in enumerate(tree)]
    if isinstance(tree, str) and "$" in tree:
        before = len(problems.items)
        expanded = _ENV.sub(lambda m: _substitute(m, environ, problems, path), tree)
        return Unresolved(tree) if len(problems.items) > before else Substituted(expanded)
    return tree


def _substitute(match: re.Match[str], environ: Mapping[str, str], problems: Problems, path: str) -> str:
    if match.group(0) == "$$":
        return "$"
    if match.group("bad") is not None:
        problems.add(
            path, f'bad variable reference "${match.group("bad")}"; write ${{NAME}} or ${{NAME:-default}}'
        )
        return ""
    name, default = match.group("name"), match.group("default")
    if default is not None:
        return environ.get(name) or default
    if name not in environ:
        problems.add(
            path, f"environment variable {name} is not set (write ${{{name}:-default}} to give a default)"
        )
        return ""
    return environ[name]


class Section:
    """One YAML mapping being read. Unknown keys are reported when it is opened."""

    def __init__(self, raw: Mapping[str, Any], path: str, problems: Problems, keys: Iterable[str]) -> None:
        self.raw = raw
        self.path = path
        self.problems = problems
        valid = sorted(keys)
        for key in raw:
            if key not in valid:
                problems.add(path, f'unknown key "{key}"; valid: {", ".join(valid)}')

    @classmethod
    def open(cls, raw: Any, path: str, problems: Problems, keys: Iterable[str]) -> Section | None:
        """A section over ``raw``, or None (with a problem) when ``raw`` is not a mapping."""
        if not isinstance(raw, Mapping):
            problems.add(path, f"must be a mapping, got {show(raw)}")
            return None
        return cls(raw, path, problems, keys)

    def at(self, key: str) -> str:
        return child_path(self.path, key)

    def has(self, key: str) -> bool:
        return key in self.raw

    def get(self, key: str) -> Any:
        return resolve_scalar(self.raw.get(key))

    def fail(self, key: str, message: str, mentions: Iterable[str] = ()) -> None:
        """A problem at ``key``; ``mentions``: keys of this mapping its message names (``{}`` each)."""
        self.problems.add(self.at(key), message, tuple(self.at(other) for other in mentions))

    def complain(self, message: str, mentions: Iterable[str]) -> None:
        """A problem of the mapping as a whole that names some of its keys (``{}`` each)."""
        self.problems.add(self.path, message, tuple(self.at(key) for key in mentions))

    def read(self, key: str, default: T, convert: Callable[[Any], T], resolve: bool = True) -> T:
        """``convert(value)`` (its ValueError becomes a problem), or ``default`` when absent or bad.

        ``resolve`` False hands a ``Substituted`` value over as the string it is (unless it reads as null).
        """
        if key not in self.raw or isinstance(self.raw[key], Unresolved):
            return default
        value = self.get(key)
        if not resolve and value is not None:
            value = self.raw[key]
        try:
            return convert(value)
        except SpecError as exc:
            self.problems.add(self.at(key), str(exc), part=child_path(self.at(key), exc.part))
            return default
        except ValueError as exc:
            self.fail(key, str(exc))
            return default

    def section(self, key: str, keys: Iterable[str]) -> Section | None:
        """The nested mapping under ``key`` (None when absent, null, or not a mapping)."""
        if self.get(key) is None:
            return None
        return Section.open(self.raw[key], self.at(key), self.problems, keys)

    def required(self, key: str) -> bool:
        """Whether ``key`` is present and not null (a problem when it is not)."""
        if self.get(key) is None:
            self.fail(key, "missing (required)")
            return False
        return True

    def string(self, key: str, default: str) -> str:
        return self.read(key, default, string_value, resolve=False)

    def opt_string(self, key: str, default: str | None = None) -> str | None:
        return self.read(key, default, _optional(string_value), resolve=False)

    def boolean(self, key: str, default: bool) -> bool:
        return self.read(key, default, _boolean)

    def integer(self, key: str, default: int, minimum: int = 0, maximum: int | None = None) -> int:
        return self.read(key, default, lambda v: _integer(v, minimum, maximum))

    def opt_integer(
        self, key: str, default: int | None, minimum: int = 0, maximum: int | None = None
    ) -> int | None:
        return self.read(key, default, _optional(lambda v: _integer(v, minimum, maximum)))

    def number(self, key: str, default: float, low: float, high: float, low_open: bool = False) -> float:
        return self.read(key, default, lambda v: _number(v, low, high, low_open))

    def opt_number(
        self, key: str, default: float | None, low: float, high: float = math.inf, low_open: bool = False
    ) -> float | None:
        return self.read(key, default, _optional(lambda v: _number(v, low, high, low_open)))

    def duration(
        self, key: str, default: float, positive: bool = True, maximum: float = MAX_DURATION_S
    ) -> float:
        return self.read(key, default, lambda v: _duration(v, positive, maximum))

    def opt_duration(
        self, key: str, default: float | None, positive: bool = True, maximum: float = MAX_DURATION_S
    ) -> float | None:
        return self.read(key, default, _optional(lambda v: _duration(v, positive, maximum)))

    def choice(self, key: str, default: str, options: Sequence[str]) -> str:
        return self.read(key, default, lambda v: _choice(v, options))

    def items(self, key: str) -> list[tuple[str, Any]]:
        """``(path, value)`` of each element of the list under ``key`` (a problem if not a list)."""
        value = self.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self.fail(key, f"must be a list, got {show(value)}")
            return []
        return [(child_path(self.at(key), i), v) for i, v in enumerate(value)]


def _optional(convert: Callable[[Any], T]) -> Callable[[Any], T | None]:
    return lambda value: None if value is None else convert(value)


def string_value(value: Any) -> str:
    """A non-empty string."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a non-empty string, got {show(value)}")
    return str(value)


def check_name(value: Any) -> str:
    """A name that becomes a label value: letters, digits, ``_``, ``.`` and ``-``."""
    if not isinstance(value, str) or not _LABEL_SAFE.fullmatch(value):
        raise ValueError(
            f"bad name {show(value)}; use only letters, digits, _ . - (it becomes a label value)"
        )
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {show(value)}")
    return value


def _integer(value: Any, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, float) and value.is_integer():  # JSON Schema's integer: 3.0 is one too
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        expected = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"must be an integer {expected}, got {show(value)}")
    if maximum is not None and value > maximum:
        raise ValueError(f"must be an integer in [{minimum}, {maximum}], got {show(value)}")
    return value


def _number(value: Any, low: float, high: float, low_open: bool) -> float:
    bad = isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value)
    if bad or not (low < value if low_open else low <= value) or not value <= high:
        if math.isinf(high):  # "in (0, inf]" reads worse than "> 0"
            raise ValueError(f"must be a number {'>' if low_open else '>='} {low:g}, got {show(value)}")
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise ValueError(f"must be a number in {interval}, got {show(value)}")
    return float(value)


def positive_duration(value: Any, maximum: float = MAX_DURATION_S) -> float:
    """A duration > 0 and at most ``maximum`` seconds, for values read outside a ``Section``."""
    return _duration(value, True, maximum)


def _duration(value: Any, positive: bool, maximum: float = MAX_DURATION_S) -> float:
    number = resolve_scalar(value)
    if positive and isinstance(number, int | float) and not isinstance(number, bool) and number < 0:
        # The bound this value must meet, not parse_duration's ">= 0" (a 0 is refused here too).
        raise ValueError(f"must be a duration > 0, got {show(value)}")
    seconds = parse_duration(value)
    if positive and seconds <= 0:
        raise ValueError(f"must be a duration > 0, got {show(value)}")
    if seconds > maximum:
        raise ValueError(f"must be a duration of at most {show_seconds(maximum)}, got {show(value)}")
    return seconds


def show_seconds(seconds: float) -> str:
    """A bound in the largest whole unit: ``604800 -> "7d"``, ``3600 -> "1h"``, ``90 -> "90s"``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _choice(value: Any, options: Sequence[str]) -> str:
    if value not in options:
        raise ValueError(f"unknown value {show(value)}; valid: {', '.join(options)}")
    return str(value)
