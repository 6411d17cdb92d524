"""The SLO a run is judged by, defined once (``Slo``) and read one way from the daemon config, the jobs
API and flags.

``Slo`` holds an SLO with its defaults (the Etalon paper's: 99 % of requests reach fluidity 0.9):
``Dp`` as a constant or a profiled prefill model plus slack, the decode tiers (``Dd``), the fluidity
target and percentile, extra objectives (``ttft:p99<=2``) and goodput bounds. The config files one
under each name of ``slos.<name>``. ``read_slo`` reads one from a ``Section`` of that shape; the flags
(``--prefill-deadline``, ``--decode-tiers``, ``--objective``...) are put in that shape and read by the
same function (``exporter.settings.evaluation_flags``), so a bad value fails with the same message
wherever it is given. A capacity job's ``slo`` is a ``SloSpec``: the fields it changes, which
``SloSpec.applied_to`` lays over its target's ``Slo`` to make the one the search holds the target to;
it reads its fields with the field readers here (``read_objectives``, ``read_target_fluidity``...).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from exporter.settings.goodput import GOODPUT_KEYS, read_goodput
from exporter.settings.json_file import JsonFileError, read_json_file
from exporter.settings.reader import Section, Substituted, check_name, show, string_value
from exporter.stats.objectives import (
    DECODE_TIERS,
    DEFAULT_DECODE_TIER,
    DEFAULT_PERCENTILE,
    DEFAULT_PREFILL_DEADLINE_S,
    DEFAULT_TARGET_FLUIDITY,
    GoodputBounds,
    Objective,
    decode_tier,
    parse_objective,
)
from exporter.stats.prefill import PrefillModel

# The decode tier a deadline of a job's own (``decode_deadline_s``) is filed under.
TRIAL_TIER: Final = "trial"
SLO_KEYS: Final = ("prefill", "decode_tiers", "target_fluidity", "percentile", "objectives", "goodput")
PREFILL_KEYS: Final = ("deadline", "model_file", "scheduling_slack")


@dataclass(frozen=True)
class Slo:
    """Deadlines (``Dp`` constant or from a profiled model, ``Dd`` tiers), objectives and goodput bounds."""

    prefill_deadline_s: float = DEFAULT_PREFILL_DEADLINE_S
    prefill_model_file: str | None = None
    prefill_model: PrefillModel | None = None  # read from prefill_model_file when the SLO is read
    scheduling_slack_s: float = 0.0
    # ``prefill.deadline`` was written in the config: the SLO's own Dp, which no prefill profile replaces
    prefill_deadline_given: bool = False
    decode_tiers: tuple[tuple[str, float], ...] = tuple(DECODE_TIERS.items())
    target_fluidity: float = DEFAULT_TARGET_FLUIDITY
    percentile: float = DEFAULT_PERCENTILE
    objectives: tuple[Objective, ...] = ()
    goodput: GoodputBounds | None = None


@dataclass(frozen=True)
class SloSpec:
    """A capacity job's changes to its target's SLO (``slo`` in the job's parameters; ``None``: the
    target's ``Slo`` decides); ``applied_to`` makes the ``Slo`` the search holds the target to.

    Default, as in the Etalon paper: ``percentile`` % of requests reach fluidity >= ``target_fluidity``
    at the ``decode_tier`` decode deadline, with ``Dp`` from the target's stored prefill profile (or its
    configured model or constant). ``prefill_deadline_s`` forces a constant ``Dp``; ``decode_deadline_s``
    a decode deadline other than the tiers, instead of ``decode_tier`` (not with it). ``objectives`` (``ttft:p99<=2``...) and a goodput floor can be
    added: a trial passes only when every one holds.
    """

    decode_tier: str = DEFAULT_DECODE_TIER
    decode_deadline_s: float | None = None
    prefill_deadline_s: float | None = None
    target_fluidity: float | None = None
    percentile: float | None = None
    objectives: tuple[Objective, ...] = ()
    goodput: GoodputBounds | None = None
    min_goodput_ratio: float | None = None  # with ``goodput``: share of requests that must meet every bound

    def applied_to(self, slo: Slo) -> Slo:
        """The SLO a search holds its target to: ``slo`` with this job's values in place of its own,
        judged at one decode deadline (the named tier, of the target's or Etalon's, or
        ``decode_deadline_s``). The objectives and goodput bounds are the job's alone: a target's
        probing objectives do not bind a search. A ``ValueError`` names a tier the target lacks."""
        if self.decode_deadline_s is not None:
            tier = (TRIAL_TIER, self.decode_deadline_s)
        else:
            tier = (
                self.decode_tier,
                decode_tier(self.decode_tier, {**DECODE_TIERS, **dict(slo.decode_tiers)}),
            )
        prefill = {} if self.prefill_deadline_s is None else _constant_prefill(self.prefill_deadline_s)
        return replace(
            slo,
            decode_tiers=(tier,),
            target_fluidity=self.target_fluidity or slo.target_fluidity,
            percentile=self.percentile or slo.percentile,
            objectives=self.objectives,
            goodput=self.goodput,
            **prefill,
        )


def _constant_prefill(deadline_s: float) -> dict[str, Any]:
    """The prefill fields of an SLO whose ``Dp`` is this constant, which no profile replaces."""
    return {
        "prefill_deadline_s": deadline_s,
        "prefill_model_file": None,
        "prefill_model": None,
        "scheduling_slack_s": 0.0,
        "prefill_deadline_given": True,
    }


def read_slo(sec: Section, resolve_path: Callable[[str], str] = str, *, profiled: bool = False) -> Slo:
    """The SLO of one ``slos.<name>``-shaped mapping; ``resolve_path`` places a relative model file.
    ``profiled``: a prefill profile may supply the model (the daemon's jobs apply them), so a
    ``scheduling_slack`` without ``model_file`` is the slack added to that profile's prediction."""
    prefill = sec.section("prefill", PREFILL_KEYS)
    model_file, model = (
        _prefill_model(prefill, resolve_path, profiled) if prefill is not None else (None, None)
    )
    goodput = sec.section("goodput", GOODPUT_KEYS)
    return Slo(
        prefill_deadline_s=(
            prefill.duration("deadline", DEFAULT_PREFILL_DEADLINE_S)
            if prefill is not None
            else DEFAULT_PREFILL_DEADLINE_S
        ),
        prefill_model_file=model_file,
        prefill_model=model,
        scheduling_slack_s=(
            prefill.duration("scheduling_slack", 0.0, positive=False) if prefill is not None else 0.0
        ),
        prefill_deadline_given=prefill is not None and prefill.has("deadline"),
        decode_tiers=read_decode_tiers(sec),
        target_fluidity=sec.number("target_fluidity", DEFAULT_TARGET_FLUIDITY, 0.0, 1.0, low_open=True),
        percentile=sec.number("percentile", DEFAULT_PERCENTILE, 0.0, 100.0, low_open=True),
        objectives=read_objectives(sec),
        goodput=read_goodput(goodput) if goodput is not None else None,
    )


def read_target_fluidity(sec: Section) -> float | None:
    """A job's ``target_fluidity`` override (None: the target's), in (0, 1] as ``read_slo`` takes it."""
    return sec.opt_number("target_fluidity", None, 0.0, 1.0, low_open=True)


def read_percentile(sec: Section) -> float | None:
    """A job's ``percentile`` override (None: the target's), in (0, 100] as ``read_slo`` takes it."""
    return sec.opt_number("percentile", None, 0.0, 100.0, low_open=True)


def _prefill_model(
    sec: Section, resolve_path: Callable[[str], str], profiled: bool
) -> tuple[str | None, PrefillModel | None]:
    """``prefill.model_file`` and the model read from it (a constant ``deadline`` excludes both)."""
    if sec.has("deadline") and sec.has("model_file"):
        sec.problems.add(sec.path, "give either deadline (a constant Dp) or model_file, not both")
    if not sec.has("model_file"):
        if sec.has("scheduling_slack") and not profiled:
            sec.fail("scheduling_slack", "applies only with model_file (a constant deadline has no slack)")
        return None, None
    path = sec.read("model_file", None, lambda v: resolve_path(string_value(v)))
    if path is None:
        return None, None
    return path, sec.read("model_file", None, lambda _: read_prefill_model(path))


def read_prefill_model(path: str) -> PrefillModel:
    """The prefill model a ``profile`` run wrote to ``path``, read bounded as a state file is."""
    try:
        data = read_json_file(Path(path))
    except OSError as exc:
        raise ValueError(f"cannot read the prefill model file {path}: {exc.strerror}") from None
    except JsonFileError as exc:
        raise ValueError(f"cannot read the prefill model file {path}: {exc}") from None
    return PrefillModel.from_dict(data)


def read_decode_tiers(sec: Section) -> tuple[tuple[str, float], ...]:
    """``decode_tiers: {name: deadline, ...}``, each name label-safe (the default: Etalon's three)."""
    raw = sec.get("decode_tiers")
    if raw is None and not sec.has("decode_tiers"):
        return Slo.decode_tiers
    if not isinstance(raw, Mapping) or not raw:
        sec.fail("decode_tiers", f"must map tier names to deadlines, e.g. {{medium: 50ms}}, got {show(raw)}")
        return ()
    tiers = Section(raw, sec.at("decode_tiers"), sec.problems, [str(k) for k in raw])
    for name in raw:
        _check_tier_name(tiers, name)
    return tuple((str(name), tiers.duration(str(name), 0.05)) for name in raw)


def _check_tier_name(tiers: Section, name: Any) -> None:
    try:
        check_name(name)
    except ValueError as exc:
        tiers.fail(str(name), str(exc))


def parse_decode_tiers(text: str) -> dict[str, Substituted]:
    """``"strict=25ms,medium=0.05"`` as a ``decode_tiers`` mapping, each value read as YAML reads it."""
    tiers: dict[str, Substituted] = {}
    for item in text.split(","):
        name, equals, value = item.partition("=")
        if not equals:
            raise ValueError(f'"{item.strip()}" needs a deadline, e.g. medium=0.05 or medium=50ms')
        tiers[name.strip()] = Substituted(value.strip())
    return tiers


def read_objectives(sec: Section) -> tuple[Objective, ...]:
    """``objectives: [ttft:p99<=2, ...]``; a bad one is a problem under its index."""
    parsed = [_objective_at(sec, path, raw) for path, raw in sec.items("objectives")]
    return tuple(slo for slo in parsed if slo is not None)


def _objective_at(sec: Section, path: str, raw: Any) -> Objective | None:
    try:
        return _objective(raw)
    except ValueError as exc:
        sec.problems.add(path, str(exc))
        return None


def _objective(value: Any) -> Objective:
    if not isinstance(value, str):
        raise ValueError(f"must be an SLO like ttft:p99<=2, got {show(value)}")
    return parse_objective(value)
