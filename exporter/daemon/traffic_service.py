"""The daemon's traffic observer (``traffic:`` in the config): the ext_proc server of
``exporter.traffic.observer`` feeding ``exposition.traffic_stats.TrafficStats`` with users' records and
``exposition.traffic_agreement.ProbeAgreement`` with the probes' (which the probe jobs feed with their
client's view of the same requests), started and stopped with the daemon. gRPC is the optional
``traffic`` extra, imported only here and only when the section is set, so the core install runs every
other config without it and says which extra a traffic config needs."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from exporter.evaluation import EvaluationSpec
from exporter.exposition.traffic_agreement import ProbeAgreement
from exporter.exposition.traffic_stats import ObserverHealth, TrafficStats
from exporter.settings import Config
from exporter.settings.buckets import HistogramBuckets
from exporter.settings.traffic import TrafficConfig
from exporter.streams.result import ProbeResult
from exporter.traffic.record import Observed

if TYPE_CHECKING:
    from exporter.traffic.observer import ObserverCounts, TrafficObserver

MISSING_EXTRA = (
    "traffic: the observer needs grpcio and protobuf, which are not installed; "
    "install the extra: pip install 'fluidity-exporter[traffic]'"
)
_EXTRA_MODULES = ("grpc", "google")


class TrafficService:
    """The observer, its figures and its agreement with the probes."""

    def __init__(
        self,
        config: TrafficConfig,
        stats: TrafficStats,
        agreement: ProbeAgreement,
        *,
        wall_clock: Callable[[], float] = time.time,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.config = config
        self.stats = stats
        self.agreement = agreement
        self.observer: TrafficObserver | None = None
        self.port: int | None = None  # where it listens, once started (the one chosen for port 0)
        self._wall_clock = wall_clock
        self._clock = clock  # the observer's: its stamps are this clock's

    @classmethod
    def of(
        cls, config: Config, buckets: HistogramBuckets, windows: Mapping[str, float]
    ) -> TrafficService | None:
        """The service a config asks for (None without ``traffic:``); ``windows``: label -> seconds."""
        if config.traffic is None:
            return None
        spec = EvaluationSpec.of(config.slos[config.traffic.slo])
        return cls(config.traffic, TrafficStats(spec, buckets, windows), ProbeAgreement(spec))

    async def start(self) -> None:
        """Listen on ``ext_proc_address``; ``RuntimeError`` naming the extra when gRPC is missing,
        ``OSError`` when the address cannot be bound."""
        try:
            from exporter.traffic.observer import TrafficObserver
        except ImportError as exc:
            if (exc.name or "").split(".")[0] in _EXTRA_MODULES:
                raise RuntimeError(MISSING_EXTRA) from None
            raise
        self.observer = TrafficObserver(self.config, self.stats.add, self._observed_probe, clock=self._clock)
        self.port = await self.observer.start()

    async def stop(self) -> None:
        if self.observer is not None:
            await self.observer.stop()

    def _observed_probe(self, record: Observed) -> None:
        if record.probe_id is not None:
            self.agreement.observed(record.probe_id, record.result)

    def probe_results(self, results: Sequence[ProbeResult]) -> None:
        """A probe run's results, as its client saw them: each joins the observer's view of it."""
        self.agreement.client_results(results)

    def health(self) -> ObserverHealth:
        """The observer's state now (all at 0 before it started)."""
        if self.observer is None:
            return ObserverHealth()
        return observer_health(self.observer.counts, self._wall_clock() - self._clock())

    def render_text(self) -> str:
        """The traffic families for /metrics."""
        return self.stats.render_text(self.health(), self.agreement.counts())


def observer_health(counts: ObserverCounts, wall_offset: float) -> ObserverHealth:
    """The health figures of ``counts``; ``wall_offset`` turns the observer's clock into unix time."""
    last = counts.last_message_at
    return ObserverHealth(
        skipped=dict(counts.skipped),
        in_flight=counts.in_flight,
        streams={end.value: count for end, count in counts.ends.items()},
        connections=len(counts.peers),
        last_message_unix_s=last + wall_offset if last is not None else None,
    )
