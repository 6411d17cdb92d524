"""A load plan: which requests to send, and when (open loop) or how many at once (closed loop).

Every load runs from one: a scheduled probe (``exporter.daemon.target_pool``), a one-shot run (``load_plan``
builds it from the flags), a capacity trial, and a shard's slice. ``runner.run_plan`` sends it; the
shard pool deals it over processes or pods. The plan is plain data: it says what the load is, never
how it is driven (the clock, the stop, where results go: ``runner.RunHooks``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from exporter.load.health import HealthThresholds
from exporter.streams.request import RequestSpec

if TYPE_CHECKING:  # the report's figure, built above the runner (``target_facts``)
    from exporter.load.target_facts import ContextFit

Offsets = Sequence[float] | npt.NDArray[np.float64]  # absolute send offsets in seconds from the start


@dataclass(frozen=True)
class LoadPlan:
    """What to send and when: specs with open-loop ``offsets``, or a closed-loop ``concurrency``.

    ``specs`` may be a list or a lazy iterator (a duration-limited closed loop draws only what it
    sends). ``rate`` (req/s) is quoted in the send-rate check; ``prompt_tokens_exact`` says whether the
    prompts were built exactly for the server's tokenizer; ``from_scheduled`` reads TTFT from the
    scheduled time (charging the client's own lateness to the request, as a trial does)."""

    specs: Sequence[RequestSpec] | Iterator[RequestSpec]
    offsets: Offsets | None = None
    concurrency: int | None = None
    rate: float | None = None
    duration: float | None = None  # no new sends after it; those in flight end under their timeouts
    max_requests: int | None = None  # sessions, for a workload of sessions
    max_in_flight: int | None = None  # an open loop's cap; a send it holds back shows as late
    prompt_tokens_exact: bool = False
    from_scheduled: bool = False
    limits: HealthThresholds | None = None  # the health checks' thresholds (default: their own)
    description: str = ""  # for a report: the workload and its arrivals
    # How the workload met the served context, for the report (None: a trace, replayed as it is).
    fit: ContextFit | None = None

    @property
    def open_loop(self) -> bool:
        return self.concurrency is None
