"""The ``/metrics`` body, rendered at most once per ``MAX_AGE_S`` however often it is scraped.

Rendering every family and compressing it runs on the probes' event loop: a flood of scrapes (570 a
second) rendered it 570 times a second and delayed the probes' reads until most runs were flagged
unreliable. A scrape within ``MAX_AGE_S`` of the last rendering gets the same bytes (and the same gzip),
which is as fresh as a Prometheus scrape needs: it samples every 15 s or more.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable

MAX_AGE_S = 1.0
GZIP_LEVEL = 1  # as prometheus_client: a /metrics body shrinks ~10x even at the fastest level


class MetricsCache:
    """``render()``'s bytes and their gzip, kept ``max_age_s`` (0: rendered for every scrape);
    ``clock`` is monotonic seconds."""

    def __init__(
        self,
        render: Callable[[], bytes],
        max_age_s: float = MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._render = render
        self.max_age_s = max_age_s  # public: a benchmark compares it with 0 in one run
        self._clock = clock
        self._rendered_at = float("-inf")
        self._text = b""
        self._gzipped: bytes | None = None  # compressed on the first scrape that asks for it

    def body(self, *, gzipped: bool) -> bytes:
        """The current body, compressed when ``gzipped``."""
        now = self._clock()
        if now - self._rendered_at >= self.max_age_s:
            self._text, self._gzipped, self._rendered_at = self._render(), None, now
        if not gzipped:
            return self._text
        if self._gzipped is None:
            self._gzipped = gzip.compress(self._text, compresslevel=GZIP_LEVEL)
        return self._gzipped
