"""What the daemon derives from its config: window labels, where state is kept, the histogram bounds,
how much the result store keeps, which probes a reload changes, and what a reload cannot change in a
running process (pure)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from exporter.exposition.store_limits import StoreLimits
from exporter.settings import Config
from exporter.settings.buckets import BUCKET_PRESETS, HistogramBuckets
from exporter.settings.model import BUCKET_NAMES, Module, Target


def window_label(seconds: float) -> str:
    """``300 -> "5m"``, ``3600 -> "1h"``, ``90 -> "90s"``: the ``window`` label value."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def profiles_folder(config: Config) -> Path | None:
    """Where prefill profiles are kept: ``state_dir/profiles`` (None: in memory only)."""
    state_dir = config.global_.state_dir
    return Path(state_dir) / "profiles" if state_dir is not None else None


def jobs_folder(config: Config) -> Path | None:
    """Where job history is kept: ``state_dir/jobs`` (None: in memory only)."""
    state_dir = config.global_.state_dir
    return Path(state_dir) / "jobs" if state_dir is not None else None


def histogram_buckets(config: Config) -> HistogramBuckets:
    """The config's bucket preset with its per-histogram overrides on top."""
    chosen = config.global_.buckets
    overrides = {name: getattr(chosen, name) for name in BUCKET_NAMES if getattr(chosen, name) is not None}
    return dataclasses.replace(BUCKET_PRESETS[chosen.preset], **overrides)


def store_limits(config: Config) -> StoreLimits:
    """How much the result store keeps: the results of the longest window, at most
    ``global.max_results_per_window`` of them."""
    return StoreLimits(
        max_age_s=max(config.global_.windows_s), max_records=config.global_.max_results_per_window
    )


def probe_changed(old: Config, new: Config, target: Target, module: Module) -> bool:
    """Whether a reload changes what the (target, module) probe does (its target, module or SLO)."""
    try:
        before = (old.target(target.name), old.module(module.name), old.slo_for(target.name))
    except LookupError:
        return True
    return before != (target, module, new.slo_for(target.name))


def unapplied_changes(old: Config, new: Config, listening_on: str | None, by_flag: bool) -> list[str]:
    """What a reload cannot change in a running process, said aloud instead of ignored: a new
    ``listen_address`` other than the one bound (``listening_on``; the old config's when not known), a
    new ``jobs_listen_address``, and a changed ``traffic`` section (the observer keeps its address, SLO
    and models). A file set back to the bound address changes nothing, and a file that did not change
    is no news."""
    notes = _listen_change(old, new, listening_on, by_flag)
    if old.traffic != new.traffic:
        notes.append(
            "traffic changed: the observer keeps its previous settings until the exporter is restarted"
        )
    return notes


def _listen_change(old: Config, new: Config, listening_on: str | None, by_flag: bool) -> list[str]:
    before, after = old.global_.listen_address, new.global_.listen_address
    where = listening_on or before
    notes = [] if after in (before, where) else [
        f"global.listen_address changed from {before} to {after}: the exporter keeps listening on "
        f"{where} until it is restarted"
        + (" (and --web.listen-address wins over the file)" if by_flag else "")
    ]  # fmt: skip
    return notes + _jobs_address_change(old, new)


def _jobs_address_change(old: Config, new: Config) -> list[str]:
    """A new ``global.jobs_listen_address``: the jobs API stays where it listens until a restart."""
    before, after = old.global_.jobs_listen_address, new.global_.jobs_listen_address
    if before == after:
        return []
    return [
        f"global.jobs_listen_address changed from {before or 'none (beside /metrics)'} to "
        f"{after or 'none (beside /metrics)'}: the jobs API and /-/reload stay where they listen until "
        "the exporter is restarted (a --web.jobs-listen-address flag wins over the file)"
    ]
