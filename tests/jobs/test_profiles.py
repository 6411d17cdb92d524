"""Stored prefill profiles: they survive a restart, bad files are skipped by name, and the deadlines they set."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from exporter.evaluation import DeadlinePolicy
from exporter.jobs.profiles import (
    ProfileStore,
    StoredProfile,
    deadline_policy_with_profile,
    profile_file_name,
    profile_overridden,
)
from exporter.settings import load_config_file
from exporter.settings.problems import Problems
from exporter.settings.reader import Section
from exporter.settings.slo import SLO_KEYS, read_slo
from exporter.stats.prefill import PrefillModel

MODEL = PrefillModel(
    coefficients=(0.02, 1e-4, 1e-9), prompt_range=(128.0, 16384.0), sample_count=8, rmse=0.003
)
OTHER = PrefillModel(coefficients=(0.5, 0.0, 0.0), prompt_range=(1.0, 2.0), sample_count=2, rmse=0.0)
SAMPLES = [{"prompt_tokens": 128, "min_ttft_s": 0.035}, {"prompt_tokens": 16384, "min_ttft_s": 1.9}]


def test_a_profile_survives_a_new_store_on_the_same_folder(tmp_path: Path) -> None:
    folder = tmp_path / "state" / "profiles"  # created on the first save
    saved = ProfileStore(folder).save("local-vllm", MODEL, 1_700_000_000.5, SAMPLES)
    assert saved == StoredProfile("local-vllm", MODEL, 1_700_000_000.5, tuple(SAMPLES))
    again = ProfileStore(folder)
    assert again.load("local-vllm") == saved
    assert again.load_all() == {"local-vllm": saved}
    assert again.load("other") is None
    assert [p.name for p in folder.iterdir()] == ["local-vllm.json"]  # no temporary file left behind


def test_saving_again_replaces_the_profile(tmp_path: Path) -> None:
    store = ProfileStore(tmp_path)
    store.save("a", MODEL, 1.0)
    newer = store.save("a", OTHER, 2.0)
    assert ProfileStore(tmp_path).load_all() == {"a": newer}
    assert newer.samples == ()


def test_bad_files_are_skipped_with_a_warning_naming_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = ProfileStore(tmp_path)
    good = store.save("good", MODEL, 1.0)
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    (tmp_path / "wrong.json").write_text(json.dumps({"target": "wrong"}), encoding="utf-8")
    bad_model = good.to_dict() | {"target": "bad-model", "model": {"kind": "cubic"}}
    (tmp_path / "bad-model.json").write_text(json.dumps(bad_model), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="exporter.jobs.profiles"):
        assert store.load_all() == {"good": good}
        assert store.load("broken") is None
    warned = "\n".join(record.getMessage() for record in caplog.records)
    for name in ("broken.json", "wrong.json", "bad-model.json"):
        assert str(tmp_path / name) in warned


def test_a_file_holding_another_target_is_not_returned_for_this_one(tmp_path: Path) -> None:
    store = ProfileStore(tmp_path)
    store.save("a", MODEL, 1.0)
    (tmp_path / "a.json").rename(tmp_path / "b.json")
    assert store.load("b") is None
    assert set(store.load_all()) == {"a"}  # the file's own target counts


def test_memory_mode_keeps_profiles_in_the_store_only(tmp_path: Path) -> None:
    store = ProfileStore(None)
    assert store.load_all() == {} and store.load("a") is None
    saved = store.save("a", MODEL, 3.0)
    assert store.load("a") == saved and store.load_all() == {"a": saved}
    assert ProfileStore(None).load_all() == {}


def test_a_missing_folder_holds_no_profiles(tmp_path: Path) -> None:
    assert ProfileStore(tmp_path / "nope").load_all() == {}


@pytest.mark.parametrize("target", ["../../etc/passwd", "..", ".", "a/b", "a\\b", "x y", "ünï"])
def test_any_target_name_stays_inside_the_folder(tmp_path: Path, target: str) -> None:
    name = profile_file_name(target)
    assert "/" not in name and name not in (".", "..")
    store = ProfileStore(tmp_path / "profiles")
    saved = store.save(target, MODEL, 1.0)
    assert [p.parent for p in (tmp_path / "profiles").iterdir()] == [tmp_path / "profiles"]
    assert store.load(target) == saved and store.load_all() == {target: saved}


def test_label_safe_target_names_are_kept_as_they_are() -> None:
    assert profile_file_name("local-vllm_2.a") == "local-vllm_2.a.json"
    with pytest.raises(ValueError, match="needs a target name"):
        profile_file_name("")


def test_a_stored_profile_sets_dp_when_the_slo_has_no_model() -> None:
    policy = DeadlinePolicy(prefill_deadline=1.0, scheduling_slack=0.25, target_fluidity=0.8)
    profile = StoredProfile("a", MODEL, 1.0)
    applied = deadline_policy_with_profile(policy, profile)
    assert applied.prefill_model == MODEL
    assert applied.scheduling_slack == 0.25 and applied.target_fluidity == 0.8
    lengths = np.array([128.0, 4096.0])
    assert applied.prefill_deadlines(lengths) == pytest.approx(MODEL.predict(lengths) + 0.25)


def test_the_config_gives_an_applied_profile_its_slack(tmp_path: Path) -> None:
    """``prefill.scheduling_slack`` without a model file: the slack a profile applied by a job gets
    (once refused, which left a profiled Dp at the isolated prefill time, missed by any queueing)."""
    path = tmp_path / "config.yaml"
    path.write_text(
        "targets:\n  - {name: a, url: 'http://127.0.0.1:9', slo: s}\nmodules: {m: {}}\n"
        "slos:\n  s:\n    prefill: {scheduling_slack: 250ms}\n"
    )
    config = load_config_file(path)
    policy = DeadlinePolicy.of(config.slo_for(config.target("a")))
    applied = deadline_policy_with_profile(policy, StoredProfile("a", MODEL, 1.0))
    lengths = np.array([128.0, 4096.0])
    assert applied.prefill_deadlines(lengths) == pytest.approx(MODEL.predict(lengths) + 0.25)


def test_a_model_configured_in_the_slo_wins_and_no_profile_changes_nothing() -> None:
    configured = DeadlinePolicy(prefill_model=OTHER, scheduling_slack=0.1)
    assert deadline_policy_with_profile(configured, StoredProfile("a", MODEL, 1.0)) is configured
    constant = DeadlinePolicy(prefill_deadline=2.0)
    assert deadline_policy_with_profile(constant, None) is constant


@pytest.mark.parametrize(
    ("slo", "why"),
    [
        ({}, None),
        ({"prefill": {"scheduling_slack": "250ms"}}, None),
        (
            {"prefill": {"deadline": "1s"}},
            "slos.interactive.prefill.deadline (1 s) is the SLO's Dp; for profiles to set it, give "
            "prefill.scheduling_slack without a deadline",
        ),
    ],
)
def test_a_profile_sets_dp_only_where_the_slo_leaves_it_to_profiles(
    slo: dict[str, object], why: str | None
) -> None:
    """A deadline written in the config is the operator's SLO; the default one is a guess a profile
    replaces (the profile job's result says which: applied, or not_applied_because)."""
    problems = Problems()
    options = read_slo(Section(slo, "slos.interactive", problems, SLO_KEYS), profiled=True)
    assert not problems
    assert profile_overridden(options, "interactive") == why
