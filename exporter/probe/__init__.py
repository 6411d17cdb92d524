"""The measuring half: a streaming client that times every token of an OpenAI-compatible endpoint.

Network I/O only stamps times (``time.perf_counter``, the monotonic clock shared by every process on
the machine): on plain TCP under Linux the kernel's own receive stamp of each read (``stamped.py``),
else the moment the event loop reads it (``http.py``); what those stamps mean (TTFT, intervals, fluidity) is computed by pure functions on the
recorded ``ProbeResult``. Target failures never raise: every request ends as a result with an
``Outcome`` and whatever partial timings it got.
"""

from exporter.probe.client import ProbeClient, TargetError
from exporter.settings.target import TargetSettings
from exporter.streams.request import APIS, Api, RequestSpec, Secret, Timeouts
from exporter.streams.result import Outcome, ProbeResult, TokenSource, e2e, intervals, ttft

__all__ = [
    "APIS",
    "Api",
    "Outcome",
    "ProbeClient",
    "ProbeResult",
    "RequestSpec",
    "Secret",
    "TargetError",
    "TargetSettings",
    "Timeouts",
    "TokenSource",
    "e2e",
    "intervals",
    "ttft",
]
