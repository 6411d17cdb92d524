"""How a coordinator judges the shards of a sharded run: plain values, read from ``jobs.shards.pool``
and the flags, used by ``exporter.load``'s shard pool."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PoolSettings:
    """How the coordinator judges its shards."""

    start_delay_s: float = 0.5  # from the last ready to the common start
    max_start_lateness_s: float = 0.1  # a shard that began later than this makes the run unfit
    ready_timeout_s: float = 60.0  # every shard must be ready within this
    heartbeat_timeout_s: float = 10.0  # a shard silent this long is dead (it posts every 0.5 s when well)
    max_unreliable_share: float = 0.01  # share of a shard's results flagged saturated (load.health's
    # bound of requests, ``unreliable``: a shard's figures count requests, not the gaps they doubt)
    stop_grace_s: float = 10.0  # after "stop", how long the shards get to post their cancelled results
