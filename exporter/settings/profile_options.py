"""The options of the ``profile`` command, read once from its flags: the target, the prompt lengths
(``--lengths``, or a doubling ladder up to ``--max-length``), the requests per length, the worker
processes and where the model is written."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.settings.job_params import DEFAULT_HIGH, ProfileParams, distinct_lengths, geometric_ladder
from exporter.settings.oneshot import FlagReading, RawFlags, checked_workers
from exporter.settings.problems import SettingsError
from exporter.settings.target_flags import TargetFlags, read_target_flags

DEFAULT_OUTPUT = "prefill-model.json"


@dataclass(frozen=True)
class ProfileOptions:
    """Everything ``profile`` was told: the target, the prompt lengths to profile (before fitting them
    to its context), ``repeats`` requests per length, the worker processes taking turns, and where the
    model is written (``output``; an existing one replaced only with ``force``) or printed (``json``)."""

    target: TargetFlags
    lengths: tuple[int, ...]
    repeats: int = ProfileParams.repeats
    workers: int = 1
    output: str = DEFAULT_OUTPUT
    force: bool = False
    json: bool = False


def read_profile_options(raw: RawFlags) -> ProfileOptions:
    """``profile``'s flags, every bad one reported together, before any request is sent."""
    reading = FlagReading()
    repeats = reading(lambda: _repeats(raw.get("repeats")))
    workers = reading(lambda: checked_workers(raw.get("workers")))
    ladder = reading(lambda: read_lengths(raw.get("lengths"), raw.get("max_length")))
    target = reading(lambda: read_target_flags(raw))
    reading.done()
    assert repeats is not None and workers is not None and ladder is not None and target is not None
    return ProfileOptions(
        target, ladder, repeats, workers, str(raw.get("output") or DEFAULT_OUTPUT),
        force=bool(raw.get("force")), json=bool(raw.get("json")),
    )  # fmt: skip


def _repeats(repeats: int | None) -> int:
    """``--repeats``: requests per length, at least one."""
    if repeats is None:
        return ProfileParams.repeats
    if repeats < 1:
        raise SettingsError("--repeats must be >= 1")
    return repeats


def read_lengths(lengths: str | None, max_length: int | None) -> tuple[int, ...]:
    """``--lengths``, or the doubling ladder up to ``--max-length``."""
    if lengths:
        if max_length is not None:
            raise SettingsError(
                "give either --lengths or --max-length (the top of the default ladder), not both"
            )
        return _given_lengths(str(lengths))
    try:
        # ``is None``, not ``or``: 0 is a bad value to refuse, not "not given" (it ran the default ladder)
        return geometric_ladder(high=DEFAULT_HIGH if max_length is None else max_length)
    except ValueError as exc:
        raise SettingsError(f"--max-length: {exc}") from exc


def _given_lengths(text: str) -> tuple[int, ...]:
    """``--lengths``: distinct prompt lengths of at least one token (a length twice would be profiled twice)."""
    try:
        values = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise SettingsError(f'--lengths "{text}": expected integers, e.g. 128,512,2048') from None
    if not values or min(values) < 1:
        raise SettingsError("--lengths: every length must be >= 1 token")
    try:
        return distinct_lengths(values)  # the jobs API's rule, and its message
    except ValueError as exc:
        raise SettingsError(f"--lengths: {exc}") from None
