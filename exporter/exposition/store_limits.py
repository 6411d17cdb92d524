"""``StoreLimits``: the bounds on what the result store keeps, so that nothing grows with uptime.

Apart from the store (``store``) because they are its settings: the daemon builds them from its config
(its windows) and ``probe_registry`` sizes them to one probe's results.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class StoreLimits:
    """Bounds on what the store keeps, per (target, module) unless said otherwise."""

    max_age_s: float = 3600.0  # the longest window; rows older than this are dropped
    # Rows kept at most. One hour of a 4-request probe every 10 s is 1440 rows; at ~150 bytes a row,
    # 4096 rows are ~600 KB per series. A window whose rows overflow this bound is silently shorter,
    # which fluidity_window_requests shows.
    max_records: int = 4096
    recent_results: int = 20
    recent_failures: int = 50  # failures are kept longer, for the debug view
    engine_max_items: int = 241  # engine snapshots per target: one hour scraped every 15 s

    def __post_init__(self) -> None:
        if not (math.isfinite(self.max_age_s) and self.max_age_s > 0):
            raise ValueError(f"max_age_s must be finite and > 0, got {self.max_age_s!r}")
        for name in ("max_records", "recent_results", "recent_failures"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.engine_max_items < 2:
            raise ValueError(f"engine_max_items must be >= 2, got {self.engine_max_items!r}")
