"""What a job runner gets from where it runs: the daemon (``JobEnvironment``), the target's model, the shards.

Each runner (``capacity_runner``, ``profile_runner``) takes the parsed parameters and a ``JobContext``
(progress and steps, persisted by the job store) and returns the JSON-ready result. What it needs from
the daemon (the current config, the target's probe client, its deadlines, where profiles go) comes
through ``JobEnvironment``, so the runners can be driven by the daemon or by a test with a simulator on
loopback. Apart from the runners because both take it, and the shards they send through (``job_shards``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from exporter.evaluation import DeadlinePolicy
from exporter.jobs.manager import JobFailedError
from exporter.jobs.prefill_profile import PrefillProfile
from exporter.load.shards.local import local_shards
from exporter.load.shards.pool import ShardPool, remote_shards
from exporter.probe.client import ProbeClient, TargetError
from exporter.settings.addresses import bind_reason
from exporter.settings.job_params import JobLimits
from exporter.settings.model import Config, ShardsConfig
from exporter.settings.shards import PoolSettings
from exporter.streams.request import Secret


class JobEnvironment(Protocol):
    """What the runners need from the daemon."""

    @property
    def config(self) -> Config: ...

    def job_limits(self) -> JobLimits: ...

    def lease(self, target: str) -> contextlib.AbstractAsyncContextManager[ProbeClient]:
        """The target's client, for the job's whole life: a reload that changes or removes the target
        takes effect for the next job."""

    def deadline_policy(self, target: str) -> DeadlinePolicy: ...

    def store_profile(self, target: str, profile: PrefillProfile) -> None: ...

    async def engine_busy(self, target: str) -> float | None:
        """Requests running + waiting in the target's engine from a fresh scrape of its metrics (None
        without engine metrics or when the scrape fails)."""

    async def wait_idle(self, target: str) -> None:
        """Until no probe of ours is in flight to ``target`` (new ones are paused by then)."""


async def model_of(client: ProbeClient) -> str:
    """The target's model; a target that cannot name it fails the job with its answer (not a bug)."""
    try:
        return await client.resolve_model()
    except TargetError as exc:
        raise JobFailedError(exc.explain()) from None


@dataclass(frozen=True)
class ShardsWanted:
    """Where a job asks its sends to go: the Indexed Job's pods when ``remote`` (``jobs.shards``) is
    configured (they present ``token``, ``jobs.shards.token``, else the jobs token), else ``workers``
    local worker processes (None: ``jobs.workers``) judged by ``local``, else, with ``in_process`` (a
    workload of sessions, whose turns need one place) and one worker, the daemon's own process."""

    remote: ShardsConfig | None = None
    token: Secret | None = None
    workers: int | None = None
    local: PoolSettings | None = None
    in_process: bool = False


@contextlib.asynccontextmanager
async def job_shards(
    wanted: ShardsWanted, env: JobEnvironment, client: ProbeClient
) -> AsyncIterator[ShardPool | None]:
    """The shards a job sends through, as ``wanted`` says (None: the daemon's process sends).

    One worker is a process of its own, not the daemon's event loop, where the daemon's probes, engine
    scrapes and ``/metrics`` delayed the trial's reads: 4-8 of a trial's 200 requests were flagged
    unreliable at the trials' ends, so a search's answer was never published, where the same search
    from the CLI had none flagged."""
    remote, local = wanted.remote, wanted.local
    workers = wanted.workers or env.job_limits().max_workers
    credential = remote.credential(wanted.token) if remote is not None else None
    if remote is not None and credential is not None:
        pools = remote_shards(remote.count, credential.reveal(), remote.listen, remote.pool)
    elif workers > 1 or not wanted.in_process:
        pools = local_shards(workers, client.settings.api_key, local if workers > 1 else _standing_in(local))
    else:
        yield None
        return
    async with contextlib.AsyncExitStack() as stack:
        try:
            pool = await stack.enter_async_context(pools)
        except TimeoutError as exc:  # shards that never came: the job fails with who and why
            raise JobFailedError(str(exc)) from None
        except OSError as exc:  # the port is taken, e.g. by another target's sharded search
            listen = remote.listen if remote is not None else "127.0.0.1"
            raise JobFailedError(f"cannot listen for shards on {listen}: {bind_reason(exc)}") from None
        yield pool


def _standing_in(local: PoolSettings | None) -> PoolSettings:
    """The settings of the one worker that stands in for the daemon's own process: no shard rule holds
    its flagged requests against the load, as none holds them against an in-process trial; they count
    in the trial's figures (``unreliable``), which decide whether the answer is published. Failing the
    job for them made a busy machine's search end ``failed`` where it had ended with its answer."""
    return dataclasses.replace(local or PoolSettings(), max_unreliable_share=1.0)


def shards_used(pool: ShardPool | None) -> dict[str, int]:
    """How many client processes sent the job's requests (for its result)."""
    return {"workers": pool.shards if pool is not None else 1}
