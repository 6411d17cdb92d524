"""Workloads, trace loaders, the load runner, shards, and a one-shot run's load plan.

The flow is one way: a ``Workload`` (``workloads``; named ones in ``presets``, real ones in ``traces``,
prompts from ``prompts``, multi-turn ``sessions``) yields ``RequestSpec``s; an arrival process
(``exporter.settings.arrival``) yields absolute send offsets; together they are a ``plan.LoadPlan``, the
one form of any load (a scheduled probe, a one-shot run, a capacity trial, a shard's slice), and
``runner.run_plan`` sends it through an injected ``send`` (the probe client's, or a fake) and returns a ``LoadRun`` with every
``ProbeResult`` and the ``health`` checks of the load itself. A one-shot run (``bench``, ``capacity``,
``profile``) reads its flags into typed options (``exporter.settings.bench_options``...), asks the
target about itself (``target_facts``, ``calibration``), builds its workload (``workload_options``) and
its plan (``load_plan``) from them and sends the plan (``plan_runner``). Load too heavy for one
process is split into shards (the ``shards`` package: the coordinator, the shard's side and the
protocol between them); only the shards speak HTTP with aiohttp themselves, the rest through the
probe client. A new workload preset goes in ``presets``.
"""

from exporter.load.health import HealthCheck, HealthThresholds, load_health
from exporter.load.plan import LoadPlan
from exporter.load.presets import preset
from exporter.load.prompts import ApproxPromptBuilder, PromptBuilder, SimPromptBuilder
from exporter.load.runner import LoadRun, RunHooks, load_run_from_results, run_plan
from exporter.load.traces import trace_arrivals, trace_specs, trace_workload
from exporter.load.workloads import IndependentLengths, Workload
from exporter.settings.arrival import (
    ArrivalProcess,
    Constant,
    Gamma,
    Poisson,
    TraceReplay,
    offsets_within,
    parse_arrival_spec,
)
from exporter.settings.lengths import LengthDistribution, PairedLengths, parse_length_spec
from exporter.settings.presets import PRESET_NAMES
from exporter.settings.trace_files import TraceRequest, load_trace

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
    "LoadPlan",
    "LoadRun",
    "PairedLengths",
    "Poisson",
    "PromptBuilder",
    "RunHooks",
    "SimPromptBuilder",
    "TraceReplay",
    "TraceRequest",
    "Workload",
    "load_health",
    "load_run_from_results",
    "load_trace",
    "offsets_within",
    "parse_arrival_spec",
    "parse_length_spec",
    "preset",
    "run_plan",
    "trace_arrivals",
    "trace_specs",
    "trace_workload",
]
