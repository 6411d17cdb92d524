"""Every script under ``bench/`` still imports. A bench is run by hand, so when code it measures moves,
nothing else notices that its imports broke (``traffic_agreement_bench.py`` broke that way once)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))


def test_there_are_benches_to_check() -> None:
    assert len(SCRIPTS) >= 20


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda path: path.name)
def test_a_bench_imports_and_says_what_it_measures(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = importlib.util.spec_from_file_location(f"_bench_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)  # a script's work runs under its __main__ guard, not here
    assert module.__doc__, f"{path.name}: say what it measures and how to run it"
