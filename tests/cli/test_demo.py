"""The demo command end to end: the simulated engine feeds the metric core, whole vs chunked prefills."""

from __future__ import annotations

import pytest

from exporter.cli import main
from exporter.sim.engine_presets import PRESETS


def _row(output: str, label: str) -> tuple[str, str]:
    line = next(line for line in output.splitlines() if line.startswith(label))
    cells = line[len(label) :].split("  ")
    whole, chunked = (cell.strip() for cell in cells if cell.strip())
    return whole, chunked


def test_demo_shows_chunked_prefill_removing_the_long_stalls(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--requests", "120", "--rate", "12", "--seed", "3"]) == 0
    output = capsys.readouterr().out
    whole, chunked = _row(output, "longest stall p99 (s)")
    assert float(chunked) < float(whole) / 3  # whole prompts stall every running decode
    whole_rate, chunked_rate = _row(output, "fluid token rate (tok/s)")
    assert float(chunked_rate) > float(whole_rate)
    assert "fluidity medium (50 ms)" in output


def test_demo_rejects_a_bad_rate(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--rate", "0"]) == 2  # a usage error, as every command's (it exited 1)
    assert "fluidity-exporter demo: error: --requests must be >= 1 and --rate > 0, got 400 and 0" in (
        capsys.readouterr().err
    )


def test_the_preset_flag_is_spelled_as_everywhere_else(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--sim-preset", "tiny", "--requests", "20"]) == 0
    assert capsys.readouterr().out.startswith(PRESETS["tiny"].description)
    assert main(["demo", "--preset", "tiny", "--requests", "20"]) == 0  # the old spelling, still taken
    assert "--preset is deprecated and will be removed; use --sim-preset" in capsys.readouterr().err
