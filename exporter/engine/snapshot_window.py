"""A rolling window of engine snapshots with bounded memory, from which windowed figures are derived.

``SnapshotWindow(max_age_s, max_items)`` keeps the newest snapshots of one target. It keeps exactly one
snapshot at or before ``newest - max_age_s`` (the base the longest window is measured from) and
nothing older, and never more than ``max_items`` in all, so memory stays bounded however long the
daemon runs. Size ``max_items`` for the longest window: one hour scraped every 15 s needs 241; fewer
makes the longest window silently shorter, which ``WindowFigures.span_s`` then shows.

``figures(duration_s)`` derives over the latest snapshot and the newest one at least ``duration_s``
older (the oldest kept one when there is none), so the span is at least the window once the window
has filled, and only as long as the history while it fills.
"""

from __future__ import annotations

from collections import deque

from exporter.engine.derive import WindowFigures, derive
from exporter.engine.snapshot import EngineSnapshot


class SnapshotWindow:
    """The recent snapshots of one engine, oldest first."""

    def __init__(self, max_age_s: float, max_items: int) -> None:
        if not max_age_s > 0:
            raise ValueError(f"max_age_s must be > 0, got {max_age_s}")
        if max_items < 2:
            raise ValueError(f"max_items must be >= 2 (a window needs two snapshots), got {max_items}")
        self.max_age_s = max_age_s
        self.max_items = max_items
        self._items: deque[EngineSnapshot] = deque()

    def __len__(self) -> int:
        return len(self._items)

    @property
    def latest(self) -> EngineSnapshot | None:
        """The newest snapshot, if any."""
        return self._items[-1] if self._items else None

    def add(self, snapshot: EngineSnapshot) -> None:
        """Append a snapshot; a different engine kind than before starts the history afresh.

        A new kind means the target now runs another engine, and differences across the two would be
        meaningless.
        """
        newest = self.latest
        if newest is not None and snapshot.at < newest.at:
            raise ValueError(f"snapshot at {snapshot.at} is older than the newest one at {newest.at}")
        if newest is not None and snapshot.kind != newest.kind:
            self._items.clear()
        self._items.append(snapshot)
        self._evict()

    def _evict(self) -> None:
        horizon = self._items[-1].at - self.max_age_s
        while len(self._items) > self.max_items:
            self._items.popleft()
        # Drop the oldest only while the next one can serve as the base of the longest window.
        while len(self._items) > 2 and self._items[1].at <= horizon:
            self._items.popleft()

    def snapshots(self, duration_s: float | None = None) -> list[EngineSnapshot]:
        """The snapshots a window of ``duration_s`` (all kept ones when None) is derived from."""
        items = list(self._items)
        if duration_s is None or not items:
            return items
        if not duration_s > 0:
            raise ValueError(f"duration_s must be > 0, got {duration_s}")
        start = items[-1].at - duration_s
        base = max((i for i, s in enumerate(items) if s.at <= start), default=0)
        return items[base:]

    def figures(self, duration_s: float) -> WindowFigures | None:
        """Derived figures over the last ``duration_s`` seconds; None until two snapshots are in."""
        if duration_s > self.max_age_s:
            raise ValueError(f"duration_s {duration_s} is longer than the window keeps ({self.max_age_s})")
        chosen = self.snapshots(duration_s)
        return derive(chosen) if len(chosen) >= 2 else None
