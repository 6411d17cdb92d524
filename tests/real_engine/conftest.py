"""One server per engine for the whole session, set up (built or installed, cached) on first use.

The set-up is the one ``python -m scripts.real_engines setup`` runs; in CI that step runs first, so its
minutes are logged apart from the tests'. Each server logs to a file under pytest's temporary folder,
and a test that fails prints where. One server, not one per module: vLLM's CPU build takes 35-55 s to
start on a 2-core machine, and no test here needs a server no other test has used (each compares the
engine's counters before and after its own load).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scripts.real_engines.engines import ENGINES
from scripts.real_engines.server import EngineServer, free_port


def start_engine(name: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServer]:
    engine = ENGINES[name]
    engine.ensure()
    log = tmp_path_factory.mktemp(name) / "server.log"
    with engine.server(free_port(), log) as server:
        print(
            f"{name} {engine.version()} on {server.base_url}, started in {server.startup_s:.1f} s; log {log}"
        )
        yield server


@pytest.fixture(scope="session")
def llamacpp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServer]:
    yield from start_engine("llamacpp", tmp_path_factory)


@pytest.fixture(scope="session")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineServer]:
    yield from start_engine("vllm", tmp_path_factory)
