"""A target's stored prefill profile sets the Dp of its scheduled probes' fluidity, from start-up on."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from exporter.app import Daemon
from exporter.jobs.prefill_profile import PrefillProfile
from exporter.jobs.profiles import ProfileStore, StoredProfile
from exporter.settings import parse_config
from exporter.stats.prefill import PrefillModel, dump_json
from exporter.streams.result import ProbeRun
from tests.exposition.builders import smooth

CONFIG = """
global: {{state_dir: "{state_dir}"}}
targets:
  - {{name: a, url: "http://127.0.0.1:1", slo: {slo}}}
modules:
  m: {{requests_per_run: 3, schedule: {{interval: 1h}}}}
slos:
  default: {{target_fluidity: 0.9}}
  constant: {{prefill: {{deadline: 1s}}}}
  modelled: {{prefill: {{model_file: "{model_file}", scheduling_slack: 2s}}}}
"""
# Predicts 10 ms whatever the prompt: the 200 ms first tokens of ``smooth()`` all miss it.
TIGHT = PrefillModel(coefficients=(0.01, 0.0, 0.0), prompt_range=(128.0, 16384.0), sample_count=8, rmse=0.0)
SLO_MODEL = PrefillModel(coefficients=(0.5, 0.0, 0.0), prompt_range=(1.0, 2.0), sample_count=2, rmse=0.0)
LOOSE = PrefillModel(coefficients=(5.0, 0.0, 0.0), prompt_range=(128.0, 16384.0), sample_count=8, rmse=0.0)


def daemon_for(tmp_path: Path, slo: str = "default", clock: Callable[[], float] = time.time) -> Daemon:
    model_file = tmp_path / "slo-model.json"
    model_file.write_text(dump_json(SLO_MODEL), encoding="utf-8")
    text = CONFIG.format(state_dir=tmp_path / "state", slo=slo, model_file=model_file)
    return Daemon(parse_config(text, environ={}), clock=clock)


async def missed_first_tokens(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> float:
    """Run the scheduled probe job of (a, m) on canned results; the deadlines it counted as missed."""

    async def canned(target: str, module: str, *, on_demand: bool = True) -> ProbeRun:
        return ProbeRun([smooth() for _ in range(3)], 1.0)

    monkeypatch.setattr(daemon.probes, "probe_now", canned)
    await daemon.probes.probe_job("a", "m")()
    return daemon.store.view(("a", "m")).deadlines_missed["medium"]


async def test_a_profile_stored_before_start_sets_the_targets_dp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert await missed_first_tokens(daemon_for(tmp_path), monkeypatch) == 0.0  # the default Dp, 1 s
    ProfileStore(tmp_path / "state" / "profiles").save("a", TIGHT, 1_700_000_000.0)
    daemon = daemon_for(tmp_path)
    assert daemon.deadline_policy("a").prefill_model == TIGHT
    assert await missed_first_tokens(daemon, monkeypatch) > 0.0  # every first token is late for Dp = 10 ms


async def test_set_profile_changes_later_evaluations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    daemon = daemon_for(tmp_path)
    assert daemon.deadline_policy("a").prefill_model is None
    daemon.job_env.set_profile("a", StoredProfile("a", TIGHT, 1.0))
    assert daemon.deadline_policy("a").prefill_model == TIGHT
    missed = await missed_first_tokens(daemon, monkeypatch)
    assert missed > 0.0
    daemon.job_env.set_profile("a", StoredProfile("a", LOOSE, 2.0))
    assert await missed_first_tokens(daemon, monkeypatch) == missed  # a cumulative counter: none more missed


async def test_a_model_file_in_the_slo_wins_over_a_stored_profile(tmp_path: Path) -> None:
    daemon = daemon_for(tmp_path, slo="modelled")
    daemon.job_env.set_profile("a", StoredProfile("a", TIGHT, 1.0))
    policy = daemon.deadline_policy("a")
    assert policy.prefill_model == SLO_MODEL
    assert policy.scheduling_slack == 2.0


async def test_a_deadline_written_in_the_slo_wins_over_a_stored_profile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prefill.deadline is the operator's SLO: a weekly profile replaced it with the bare isolated
    prefill time, and an SLO met all week burned its error budget from Sunday on."""
    daemon = daemon_for(tmp_path, slo="constant")
    daemon.job_env.set_profile("a", StoredProfile("a", TIGHT, 1.0))
    assert daemon.deadline_policy("a").prefill_model is None
    assert daemon.deadline_policy("a").prefill_deadline == 1.0
    assert await missed_first_tokens(daemon, monkeypatch) == 0.0


def test_a_fitted_profile_is_dated_by_the_daemons_clock(tmp_path: Path) -> None:
    daemon = daemon_for(tmp_path, clock=lambda: 1_700_000_000.0)
    daemon.job_env.store_profile("a", PrefillProfile([], TIGHT))
    stored = ProfileStore(tmp_path / "state" / "profiles").load_all()["a"]
    assert (stored.model, stored.measured_at) == (TIGHT, 1_700_000_000.0)
    assert daemon.deadline_policy("a").prefill_model == TIGHT
