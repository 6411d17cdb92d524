"""Checking a config file without starting anything (``fluidity-exporter check-config``).

``check_file`` says whether a file is a valid config and gives the lines that say so: ``FILE: OK (N
targets, M modules)`` and any note on what a valid config may not mean, or ``FILE: N problems`` and every
problem, one per line. Secrets are read (a
missing variable is a problem) but never shown.
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.settings.model import Config
from exporter.settings.parse import ConfigCheck, load_config_file
from exporter.settings.problems import SettingsError
from exporter.stats.objectives import DEFAULT_DECODE_TIER


def check_file(path: str, *, checks: Sequence[ConfigCheck] = ()) -> tuple[bool, list[str]]:
    """Whether the file at ``path`` is a valid config, and the lines that say so (``checks``: as
    ``parse_config`` takes them)."""
    try:
        config = load_config_file(path, checks=checks)
    except SettingsError as exc:
        count = len(exc.problems)
        return False, [f"{path}: {count} problem{'s' if count != 1 else ''}"] + [
            f"  {problem}" for problem in exc.problems
        ]
    targets, modules = len(config.targets), len(config.modules)
    counts = f"{targets} target{'' if targets == 1 else 's'}, {modules} module{'' if modules == 1 else 's'}"
    return True, [f"{path}: OK ({counts})", *(f"  note: {note}" for note in notes(config))]


def notes(config: Config) -> list[str]:
    """What a valid config may not mean: an SLO whose decode tiers leave out the one the shipped
    burn-rate rules judge (a typo such as ``medum`` left every burn alert of its targets silent)."""
    out = []
    for name, slo in config.slos.items():
        tiers = [tier for tier, _ in slo.decode_tiers]
        targets = [t.name for t in config.targets if t.slo == name]
        if targets and DEFAULT_DECODE_TIER not in tiers:
            out.append(
                f"slos.{name}.decode_tiers has no {DEFAULT_DECODE_TIER!r} tier (it has {', '.join(tiers)}): "
                f'the shipped burn-rate rules judge tier="{DEFAULT_DECODE_TIER}" '
                "(fluidity:slo_objective:ratio in deploy/prometheus/rules/fluidity-rules.yml), so no burn "
                f"alert covers {', '.join(targets)} until an objective is recorded for one of its tiers"
            )
    return out
