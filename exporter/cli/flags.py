"""The flag groups several commands share, and how a command's flags become its options.

``add_target_arguments`` (how to reach the endpoint: ``bench``, ``capacity``, ``profile``),
``add_workload_arguments`` (a preset or custom lengths: ``bench``, ``capacity``) and
``add_prefill_arguments`` (``Dp``: ``bench``, ``capacity``) keep one spelling and one help line per
flag. ``merged_options`` lays the flags over a ``--config`` YAML file whose keys are the flags' names;
the result is the raw flag mapping each command reads once into its typed options
(``exporter.settings.oneshot``: ``read_bench_options``...).

One concept has one spelling in every command. An old spelling still works for one release, as a
``DeprecatedAlias`` (hidden from ``--help``) that says on stderr which flag to use instead; a ``--config``
file's old key works the same way (``DEPRECATED_KEYS``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from exporter.load.calibration import CALIBRATION_BUDGET_S, CALIBRATION_REQUESTS
from exporter.settings.presets import PRESET_NAMES
from exporter.settings.problems import SettingsError
from exporter.settings.target import Timeouts
from exporter.sim.process import DEFAULT_PRESET as DEFAULT_SIM_PRESET
from exporter.stats.objectives import DEFAULT_PREFILL_DEADLINE_S, DEFAULT_TARGET_FLUIDITY
from exporter.streams.request import APIS

ArgumentGroup = argparse._ArgumentGroup | argparse.ArgumentParser


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """How to reach the endpoint (shared by ``bench``, ``capacity`` and ``profile``)."""
    target = parser.add_argument_group("target")
    target.add_argument(
        "--url", help="base URL of an OpenAI-compatible server (default: start the simulator)"
    )
    target.add_argument("--api", choices=APIS, help="chat, completions or responses (default chat)")
    target.add_argument("--model", help="model name (default: the first of /v1/models)")
    target.add_argument("--api-key-env", help="environment variable holding the API key")
    target.add_argument("--api-key-file", help="file holding the API key")
    target.add_argument("--header", action="append", metavar="NAME:VALUE", help="extra request header")
    target.add_argument("--extra-body", metavar="JSON", help="JSON object merged into every request body")
    target.add_argument("--ca-file", help="CA bundle for TLS verification")
    target.add_argument("--insecure", action="store_true", default=None, help="do not verify TLS")
    target.add_argument("--sim-preset", help=f"simulator preset when no --url (default {DEFAULT_SIM_PRESET})")
    default = Timeouts()
    target.add_argument(
        "--ttft-timeout", type=float, help=f"seconds to the first token (default {default.ttft:g})"
    )
    target.add_argument(
        "--idle-timeout", type=float, help=f"longest silence mid-stream, seconds (default {default.idle:g})"
    )
    target.add_argument(
        "--total-timeout", type=float, help=f"seconds per request (default {default.total:g})"
    )
    target.add_argument(
        "--no-calibrate",
        action="store_true",
        default=None,
        help=(
            "do not calibrate prompts to the server's token counts "
            f"({CALIBRATION_REQUESTS} requests, {CALIBRATION_BUDGET_S:g} s at most)"
        ),
    )


def add_workload_arguments(group: ArgumentGroup) -> None:
    """A workload preset, or custom prompt and output lengths, and the length filters."""
    group.add_argument("--workload", help=f"preset: {', '.join(PRESET_NAMES)} (default sharegpt)")
    group.add_argument("--prompt-tokens", help="custom prompt lengths instead of a preset, e.g. fixed:512")
    group.add_argument("--output-tokens", help="custom output lengths, e.g. uniform:low=64,high=256")
    group.add_argument("--max-prompt-tokens", type=int, help="filter: longest prompt (default per preset)")
    group.add_argument("--max-output-tokens", type=int, help="filter: longest output (default per preset)")


def add_prefill_arguments(group: ArgumentGroup) -> None:
    """``Dp``: a constant, or a profiled prefill model plus slack."""
    group.add_argument(
        "--prefill-deadline",
        type=float,
        help=f"constant Dp in seconds (default {DEFAULT_PREFILL_DEADLINE_S:g})",
    )
    group.add_argument("--prefill-model", help="a profiled prefill model (JSON, from `profile`) for Dp(P)")
    group.add_argument("--scheduling-slack", type=float, help="added to the model's Dp (default 0)")
    group.add_argument(
        "--target-fluidity",
        type=float,
        help=f"fluidity a request must reach (default {DEFAULT_TARGET_FLUIDITY:g})",
    )


class DeprecatedAlias(argparse.Action):
    """An old spelling of a flag: a one-line warning on stderr naming the flag to use, then the value
    stored as the new flag stores it (``kind``: ``store``, ``append``, or ``const`` for a switch)."""

    def __init__(
        self, option_strings: Sequence[str], dest: str, *, use: str, kind: str = "store", **kwargs: Any
    ) -> None:
        if kind == "const":
            kwargs["nargs"] = 0
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)
        self.use, self.kind = use, kind

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        warn_deprecated(option_string or self.dest, self.use)
        if self.kind == "const":
            values = self.const
        elif self.kind == "append":
            values = [*(getattr(namespace, self.dest, None) or []), values]
        setattr(namespace, self.dest, values)


def warn_deprecated(old: str, new: str) -> None:
    """The one line an old spelling costs."""
    print(f"fluidity-exporter: warning: {old} is deprecated and will be removed; use {new}", file=sys.stderr)


# A --config file's old keys: the key to use, how the value reads there, and what to write instead.
DEPRECATED_KEYS: dict[str, tuple[str, Callable[[Any], Any], str]] = {
    "slo": ("objective", lambda value: value, "objective"),
    "fluid_percentile": ("percentile", lambda value: value, "percentile"),
    "no_plot": ("plots", lambda value: None if value is None else not value, "plots: false"),
}


def add_config_argument(parser: argparse.ArgumentParser, example: str = "") -> None:
    """``--config FILE``: the flags' values from a YAML file (flags win)."""
    parser.add_argument("--config", help=f"YAML file whose keys are these flags' names{example}")


def merged_options(args: argparse.Namespace) -> dict[str, Any]:
    """Flags over the ``--config`` file's keys (dashes or underscores); unknown keys are errors."""
    flags = {key: value for key, value in vars(args).items() if key not in ("command", "config")}
    if not args.config:
        return flags
    try:
        loaded = yaml.safe_load(Path(args.config).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise SettingsError(f"--config {args.config}: {exc}") from exc
    if not isinstance(loaded, dict):
        raise SettingsError(f"--config {args.config}: expected a mapping of flag names to values")
    from_file = _renamed({str(key).replace("-", "_"): value for key, value in loaded.items()}, flags)
    unknown = sorted(set(from_file) - set(flags))
    if unknown:
        named = ", ".join(f'"{key}"' for key in unknown)
        valid = ", ".join(sorted(key.replace("_", "-") for key in flags))
        raise SettingsError(
            f"--config {args.config}: unknown key{'s' * (len(unknown) > 1)} {named}; valid (the flags' names, "
            f"with dashes or underscores): {valid}"
        )
    return {key: flags[key] if flags[key] is not None else from_file.get(key) for key in flags}


def _renamed(from_file: dict[str, Any], flags: dict[str, Any]) -> dict[str, Any]:
    """The file's keys with their old spellings replaced (each with its warning)."""
    renamed = {}
    for key, value in from_file.items():
        new, convert, instead = DEPRECATED_KEYS.get(key, (key, None, key))
        if convert is not None and key not in flags and new in flags:
            warn_deprecated(f"--config key {key}", instead)
            renamed[new] = convert(value)
        else:
            renamed[key] = value
    return renamed


def error(command: str, message: object) -> None:
    """``fluidity-exporter COMMAND: error: MESSAGE`` on stderr."""
    print(f"fluidity-exporter {command}: error: {message}", file=sys.stderr)
