"""The daemon's traffic observer (``traffic:`` in the config): the ext_proc server of
``exporter.traffic.observer`` feeding ``exposition.traffic.TrafficStats``, started and stopped with the
daemon. gRPC is the optional ``traffic`` extra, imported only here and only when the section is set, so
the core install runs every other config without it and says which extra a traffic config needs."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporter.evaluation import EvaluationSpec
from exporter.exposition.traffic import TrafficStats
from exporter.settings import Config
from exporter.settings.buckets import HistogramBuckets
from exporter.settings.traffic import TrafficConfig

if TYPE_CHECKING:
    from exporter.traffic.observer import TrafficObserver

MISSING_EXTRA = (
    "traffic: the observer needs grpcio and protobuf, which are not installed; "
    "install the extra: pip install 'fluidity-exporter[traffic]'"
)
_EXTRA_MODULES = ("grpc", "google")


class TrafficService:
    """The observer and its figures."""

    def __init__(self, config: TrafficConfig, stats: TrafficStats) -> None:
        self.config = config
        self.stats = stats
        self.observer: TrafficObserver | None = None
        self.port: int | None = None  # where it listens, once started (the one chosen for port 0)

    @classmethod
    def of(cls, config: Config, buckets: HistogramBuckets) -> TrafficService | None:
        """The service a config asks for (None without ``traffic:``)."""
        if config.traffic is None:
            return None
        spec = EvaluationSpec.of(config.slos[config.traffic.slo])
        return cls(config.traffic, TrafficStats(spec, buckets))

    async def start(self) -> None:
        """Listen on ``ext_proc_address``; ``RuntimeError`` naming the extra when gRPC is missing,
        ``OSError`` when the address cannot be bound."""
        try:
            from exporter.traffic.observer import TrafficObserver
        except ImportError as exc:
            if (exc.name or "").split(".")[0] in _EXTRA_MODULES:
                raise RuntimeError(MISSING_EXTRA) from None
            raise
        self.observer = TrafficObserver(
            self.config.ext_proc_address,
            self.stats.add,
            models=frozenset(self.config.models),
            max_streams=self.config.max_streams,
        )
        self.port = await self.observer.start()

    async def stop(self) -> None:
        if self.observer is not None:
            await self.observer.stop()

    def render_text(self) -> str:
        """The traffic families for /metrics."""
        if self.observer is None:
            return self.stats.render_text({}, 0)
        counts = self.observer.counts
        return self.stats.render_text(counts.skipped, counts.in_flight)
