"""Per-target prefill profiles that survive restarts, and the deadlines they set.

A prefill-profile job fits ``TTFT(P)`` for one target; ``ProfileStore`` keeps the latest fit per target
as one JSON file under ``<state_dir>/profiles/`` (written to a temporary file and renamed, so a crash
never leaves half a profile), or in memory when there is no state folder. A file that is no valid
profile is moved aside with a warning naming it (``exporter.jobs.state_files``): one bad file must not
stop the daemon, nor hide the others. A profile whose model does not predict a finite, plausible time
for every prompt up to ``MAX_PROMPT_TOKENS`` is no valid one either: a coefficient of 1e308 predicted
an infinite ``Dp`` and every first token of its target missed it. When the folder takes no writes (a
read-only or full disk) a saved profile is still used, kept in memory, and ``write_health`` says so.

``deadline_policy_with_profile`` is how a stored profile reaches the fluidity of a target: its model
sets ``Dp(P)`` unless the SLO has a model of its own (``slos.*.prefill.model_file``) or a deadline
written in the config (``slos.*.prefill.deadline``), which win.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from exporter.evaluation import DeadlinePolicy
from exporter.jobs.state_files import WriteHealth, move_aside
from exporter.settings.json_file import JsonFileError, read_json_file
from exporter.settings.lengths import MAX_PROMPT_TOKENS
from exporter.settings.slo import Slo
from exporter.stats.prefill import PrefillModel

LOG = logging.getLogger(__name__)
FILE_VERSION = 1
_FIELDS = ("version", "target", "measured_at", "model", "samples")
# Far above any fit of a real server (a 70B model's prefill of a 1M-token prompt is of the order of an hour);
# a prediction past it comes from a damaged file, and would overflow the deadline arithmetic.
MAX_PREDICTED_PREFILL_S = 1e9


@dataclass(frozen=True)
class StoredProfile:
    """The prefill model fitted for ``target`` at unix time ``measured_at``, with the samples it came from."""

    target: str
    model: PrefillModel
    measured_at: float
    samples: tuple[Mapping[str, Any], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": FILE_VERSION,
            "target": self.target,
            "measured_at": self.measured_at,
            "model": self.model.to_dict(),
            "samples": [dict(sample) for sample in self.samples],
        }

    @classmethod
    def from_dict(cls, data: Any) -> StoredProfile:
        """Validate ``to_dict`` output; errors say what is wrong."""
        if not isinstance(data, Mapping) or sorted(data) != sorted(_FIELDS):
            raise ValueError(f"a stored profile is a mapping with the keys {', '.join(_FIELDS)}")
        if data["version"] != FILE_VERSION:
            raise ValueError(
                f"stored profile version {data['version']!r}; this exporter reads {FILE_VERSION}"
            )
        return cls(
            _target(data["target"]),
            _plausible(PrefillModel.from_dict(data["model"])),
            _unix_time(data["measured_at"]),
            _samples(data["samples"]),
        )


def _plausible(model: PrefillModel) -> PrefillModel:
    with np.errstate(over="ignore"):  # an overflow is what this looks for
        longest = model.predict(float(MAX_PROMPT_TOKENS))  # the curve only grows: its largest value
    if not longest <= MAX_PREDICTED_PREFILL_S:  # also false for inf and NaN
        raise ValueError(
            f"model: predicts {longest:g} s for a {MAX_PROMPT_TOKENS}-token prompt; a stored profile "
            f"predicts at most {MAX_PREDICTED_PREFILL_S:g} s"
        )
    return model


def _target(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"target must be a non-empty string, got {value!r}")
    return value


def _unix_time(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"measured_at must be a unix time in seconds, got {value!r}")
    return float(value)


def _samples(value: Any) -> tuple[Mapping[str, Any], ...]:
    if not isinstance(value, list) or not all(isinstance(sample, Mapping) for sample in value):
        raise ValueError("samples must be a list of mappings")
    return tuple(value)


class ProfileStore:
    """The latest profile per target: JSON files in ``folder``, or in memory when ``folder`` is None."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        self._memory: dict[str, StoredProfile] = {}  # every profile without a folder; else the unwritten
        self.write_health = WriteHealth("the prefill profile")

    def save(
        self,
        target: str,
        model: PrefillModel,
        measured_at: float,
        samples: Sequence[Mapping[str, Any]] | None = None,
    ) -> StoredProfile:
        """Keep ``model`` as ``target``'s profile (replacing any older one): in its file, or in memory
        when there is no folder or it takes no writes (``write_health`` then says so)."""
        profile = StoredProfile(target, model, measured_at, tuple(samples or ()))
        if self.folder is None:
            self._memory[target] = profile
            return profile
        text = json.dumps(profile.to_dict(), indent=1, allow_nan=False)
        try:
            _write_atomically(self.folder, profile_file_name(target), text)
        except OSError as exc:
            self._memory[target] = profile
            self.write_health.failed(self.folder / profile_file_name(target), exc)
        else:
            self._memory.pop(target, None)
            self.write_health.succeeded()
        return profile

    def load(self, target: str) -> StoredProfile | None:
        """``target``'s profile, or None when there is none (or its file is bad: logged)."""
        if self.folder is None or target in self._memory:
            return self._memory.get(target)
        path = self.folder / profile_file_name(target)
        if not path.exists():
            return None
        profile = _read(path)
        if profile is not None and profile.target != target:
            LOG.warning(
                "skipping prefill profile %s: it holds target %r, not %r", path, profile.target, target
            )
            return None
        return profile

    def load_all(self) -> dict[str, StoredProfile]:
        """Every target's profile, by target name; bad files are skipped (and logged)."""
        if self.folder is None or not self.folder.is_dir():
            return dict(self._memory)
        profiles = (_read(path) for path in sorted(self.folder.glob("*.json")))
        return {profile.target: profile for profile in profiles if profile is not None} | self._memory


def profile_file_name(target: str) -> str:
    """A file name for ``target`` that stays inside the folder whatever the name holds."""
    if not target:
        raise ValueError("a profile needs a target name")
    # Target names are already [A-Za-z0-9_.-]+ (unchanged here); anything else is percent-encoded, so
    # no name can hold a separator, and the suffix keeps "." and ".." from naming a folder.
    return quote(target, safe="") + ".json"


def deadline_policy_with_profile(
    policy: DeadlinePolicy, profile: StoredProfile | None, *, deadline_given: bool = False
) -> DeadlinePolicy:
    """``policy`` with ``Dp(P)`` from the stored profile, unless the SLO configures a model of its own
    or ``deadline_given`` (its constant ``Dp`` was written in the config).

    The SLO's scheduling slack (``prefill.scheduling_slack``, which the config allows without a model
    file for this) is added to the profile's prediction; the default constant ``Dp`` is what a model
    replaces, since the profile measured this target and the default is a guess. A deadline the
    operator wrote is the SLO itself: a profile replacing it set the bare isolated prefill time (no
    slack), which any queueing misses, and a weekly profile turned a met SLO into a burning one.
    """
    if profile is None or policy.prefill_model is not None or deadline_given:
        return policy
    return replace(policy, prefill_model=profile.model)


def profile_overridden(slo: Slo, name: str) -> str | None:
    """Why a profile stored for a target under this SLO (``slos.<name>``) does not set its ``Dp``
    (None: it does)."""
    if slo.prefill_model is not None:
        return f"slos.{name}.prefill.model_file sets Dp"
    if slo.prefill_deadline_given:
        return (
            f"slos.{name}.prefill.deadline ({slo.prefill_deadline_s:g} s) is the SLO's Dp; for profiles "
            "to set it, give prefill.scheduling_slack without a deadline"
        )
    return None


def bare_prefill_warning(slo: Slo, name: str) -> str | None:
    """What an operator should know of a profile applied under an SLO without scheduling slack (None:
    the SLO gives some): ``Dp`` becomes the isolated prefill time, so any queueing, even one request
    ahead, misses the first deadline."""
    if slo.scheduling_slack_s > 0:
        return None
    return (
        "no scheduling slack: Dp(P) is now the bare isolated prefill time, which any queueing misses "
        f"(a busy target's requests then miss their first deadline); give slos.{name}.prefill."
        "scheduling_slack (e.g. 250ms) for room"
    )


def _read(path: Path) -> StoredProfile | None:
    """The profile in ``path``, or None: a file that is no valid profile is moved aside."""
    try:
        return StoredProfile.from_dict(read_json_file(path))
    except OSError as exc:
        LOG.warning("skipping prefill profile %s: %s", path, exc)
    except (JsonFileError, ValueError, TypeError) as exc:
        move_aside(path, "prefill profile", exc)
    return None


def _write_atomically(folder: Path, name: str, text: str) -> None:
    """``text`` as ``folder/name``: written beside it, then renamed over it (readers see old or new)."""
    folder.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, folder / name)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
