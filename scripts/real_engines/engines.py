"""The real engines by name: how to set each up and how to make its server on a given port."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from scripts.real_engines import llamacpp, vllm
from scripts.real_engines.server import EngineServer


@dataclass(frozen=True)
class Engine:
    """One engine: its set-up (idempotent, cached) and its server."""

    name: str
    folder: Callable[[], Path]  # the cache folder of the pinned version
    ensure: Callable[[], Path]
    server: Callable[[int, Path], EngineServer]  # (port, log file) -> a server not yet started
    version: Callable[[], str]


def llamacpp_server(port: int, log: Path) -> EngineServer:
    return EngineServer("llama-server", llamacpp.server_command(port), port, log, start_limit_s=120.0)


def vllm_server(port: int, log: Path) -> EngineServer:
    # With --enforce-eager nothing is compiled, but torch loads and memory is profiled: 30-60 s here.
    return EngineServer("vllm", vllm.server_command(port), port, log, start_limit_s=600.0, env=vllm.RUN_ENV)


ENGINES: dict[str, Engine] = {
    "llamacpp": Engine(
        "llamacpp", llamacpp.folder, llamacpp.ensure, llamacpp_server, llamacpp.recorded_version
    ),
    "vllm": Engine("vllm", vllm.folder, vllm.ensure, vllm_server, vllm.recorded_version),
}


def engine(name: str) -> Engine:
    """The engine called ``name``; the error lists the valid names."""
    try:
        return ENGINES[name]
    except KeyError:
        raise ValueError(f'unknown engine "{name}"; valid: {", ".join(ENGINES)}') from None
