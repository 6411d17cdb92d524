"""Workloads, trace loaders, arrival processes and the load runner.

The flow is one way: a ``Workload`` (``presets``, ``traces``) yields ``RequestSpec``s; an arrival
process (``exporter.options.arrival``) yields absolute send offsets; ``runner.run_load`` sends the
specs through an injected ``send`` (the probe client's, or a fake) and returns a ``LoadRun`` with every
``ProbeResult`` and the ``health`` checks of the load itself. Only the shards (``shard_pool``,
``shard_runner``: load split across processes or pods) speak HTTP, with aiohttp and the probe client.
"""

from exporter.load.health import HealthCheck, HealthThresholds, load_health
from exporter.load.presets import PRESET_NAMES, preset
from exporter.load.prompts import ApproxPromptBuilder, PromptBuilder, SimPromptBuilder
from exporter.load.runner import LoadRun, build_plan, load_run_from_results, run_load
from exporter.load.traces import TraceRequest, load_trace, trace_arrivals, trace_specs, trace_workload
from exporter.load.workloads import IndependentLengths, PairedLengths, Workload
from exporter.options.arrival import (
    ArrivalProcess,
    Constant,
    Gamma,
    Poisson,
    TraceReplay,
    offsets_within,
    parse_arrival_spec,
)
from exporter.options.lengths import LengthDistribution, parse_length_spec

__all__ = [
    "PRESET_NAMES",
    "ApproxPromptBuilder",
    "ArrivalProcess",
    "Constant",
    "Gamma",
    "HealthCheck",
    "HealthThresholds",
    "IndependentLengths",
    "LengthDistribution",
    "LoadRun",
    "PairedLengths",
    "Poisson",
    "PromptBuilder",
    "SimPromptBuilder",
    "TraceReplay",
    "TraceRequest",
    "Workload",
    "build_plan",
    "load_health",
    "load_run_from_results",
    "load_trace",
    "offsets_within",
    "parse_arrival_spec",
    "parse_length_spec",
    "preset",
    "run_load",
    "trace_arrivals",
    "trace_specs",
    "trace_workload",
]
