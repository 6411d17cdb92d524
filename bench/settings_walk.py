"""The walk of issue 39: a target's URL from the YAML to the client that opens its socket.

Reads a one-target config and lets the daemon's ``TargetPool`` open the target's client, recording in
call order every function of ours handed the URL (a string holding it, or an object whose ``url`` or
``base_url`` is it) and the function that called it, up to ``Endpoint.parse`` (host and port from there
on). Prints the packages the URL passes through, the moves between them and the climbs back up (a move
to a higher layer of the contract in ``pyproject.toml``). On main before the settings package (config
above load, options below probe) it printed 7 moves and 3 climbs; since, 2 moves and 1 climb (settings
-> daemon -> probe: the one climb is the daemon taking the settings it opens a client with).

Usage: ``python bench/settings_walk.py [--calls]`` from the repository root (``--calls``: every call).
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import tomllib
from pathlib import Path
from types import FrameType
from typing import Any

from exporter.daemon.target_pool import TargetPool
from exporter.settings import parse_config

URL = "http://127.0.0.1:8123"
YAML = f"targets:\n  - name: a\n    url: {URL}/\n"
ROOT = Path(__file__).resolve().parent.parent


def layer_ranks() -> dict[str, int]:
    """Each package's layer, the lowest 0."""
    contract = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][0]
    return {
        name.strip(): rank
        for rank, layer in enumerate(reversed(contract["layers"]))
        for name in layer.replace(":", "|").split("|")
    }


def holds_url(value: object) -> bool:
    if isinstance(value, str):
        return URL in value
    return any(
        isinstance(getattr(value, key, None), str) and URL in getattr(value, key)
        for key in ("url", "base_url")
    )


class Walk:
    """The calls that hand the URL on, as (package, function)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        self.done = False

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or self.done or not _ours(frame) or frame.f_code.co_name.startswith("<"):
            return
        if not any(holds_url(value) for value in list(frame.f_locals.values())):
            return
        caller = frame.f_back
        while caller is not None and not _ours(caller):
            caller = caller.f_back  # a dataclass's generated __init__, a stdlib helper
        if caller is not None:
            self.calls.append(_where(caller))
        self.calls.append(_where(frame))
        self.done = frame.f_code.co_qualname == "Endpoint.parse"

    def packages(self) -> list[str]:
        out: list[str] = []
        for package, _ in self.calls:
            if not out or out[-1] != package:
                out.append(package)
        return out


def _ours(frame: FrameType) -> bool:
    return str(frame.f_globals.get("__name__", "")).startswith("exporter.")


def _where(frame: FrameType) -> tuple[str, str]:
    module = str(frame.f_globals["__name__"])
    return module.split(".")[1], f"{module}.{frame.f_code.co_qualname}"


async def walk() -> Walk:
    recorded = Walk()
    sys.setprofile(recorded.profile)
    try:
        config = parse_config(YAML, environ={})
        pool = TargetPool()
        await pool.sync(config)
    finally:
        sys.setprofile(None)
    for state in pool.states.values():
        await state.client.__aexit__(None, None, None)
    return recorded


def main() -> None:
    recorded = asyncio.run(walk())
    if "--calls" in sys.argv:
        for package, where in dict.fromkeys(recorded.calls):
            print(f"  {package:9} {where}")
    ranks, packages = layer_ranks(), recorded.packages()
    climbs = sum(ranks[after] > ranks[before] for before, after in itertools.pairwise(packages))
    print("packages:", " -> ".join(packages))
    print(f"moves between packages: {len(packages) - 1}, climbs back up: {climbs}")


if __name__ == "__main__":
    main()
