"""Checking a config file without starting anything (``fluidity-exporter check-config``).

``check_file`` says whether a file is a valid config and gives the lines that say so: ``FILE: OK (N
targets, M modules)``, or ``FILE: N problems`` and every problem, one per line. Secrets are read (a
missing variable is a problem) but never shown.
"""

from __future__ import annotations

from exporter.config.parse import ConfigError, load_config_file


def check_file(path: str) -> tuple[bool, list[str]]:
    """Whether the file at ``path`` is a valid config, and the lines that say so."""
    try:
        config = load_config_file(path)
    except ConfigError as exc:
        count = len(exc.problems)
        return False, [f"{path}: {count} problem{'s' if count != 1 else ''}"] + [
            f"  {problem}" for problem in exc.problems
        ]
    targets, modules = len(config.targets), len(config.modules)
    counts = f"{targets} target{'' if targets == 1 else 's'}, {modules} module{'' if modules == 1 else 's'}"
    return True, [f"{path}: OK ({counts})"]
