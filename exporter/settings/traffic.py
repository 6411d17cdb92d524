"""The ``traffic:`` section: the observer of real user traffic behind Envoy (``exporter.traffic``).

    traffic:
      ext_proc_address: "127.0.0.1:9469"  # *required*, HOST:PORT the gRPC observer listens on
      slo: default                        # the SLO (a name under slos) that judges real traffic
      models: []                          # model names kept as the model label; any other is "other"
                                          # (empty: those the engine's GET /v1/models lists, seen through Envoy)
      max_streams: 1024                   # streams observed at once; more are let through unobserved

A config with ``global`` and ``traffic`` alone is valid: it observes and probes nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from exporter.settings.addresses import check_listen_address
from exporter.settings.reader import Context, Section, show, string_value

TRAFFIC_KEYS = ("ext_proc_address", "slo", "models", "max_streams")
DEFAULT_MAX_STREAMS = 1024
MAX_STREAMS = 100_000  # each holds up to 64 KiB of undecoded chunks and its stamps
MAX_MODELS = 100  # each is a label value of every traffic family: series multiply by it


@dataclass(frozen=True)
class TrafficConfig:
    """Where the observer listens, the SLO judging what it sees, and the label's models."""

    ext_proc_address: str
    slo: str = "default"
    models: tuple[str, ...] = ()
    max_streams: int = DEFAULT_MAX_STREAMS


def read_traffic(ctx: Context, sec: Section, slo_names: Sequence[str]) -> TrafficConfig:
    """The section's values; each problem recorded under its path."""
    address = sec.read("ext_proc_address", "", check_listen_address, resolve=False)
    sec.required("ext_proc_address")
    return TrafficConfig(
        ext_proc_address=address,
        slo=sec.choice("slo", "default", slo_names),
        models=_models(ctx, sec),
        max_streams=sec.integer("max_streams", DEFAULT_MAX_STREAMS, 1, MAX_STREAMS),
    )


def _models(ctx: Context, sec: Section) -> tuple[str, ...]:
    items = sec.items("models")
    if len(items) > MAX_MODELS:
        sec.fail("models", f"lists {len(items)} models; at most {MAX_MODELS} (each is a label value)")
    models: list[str] = []
    for path, raw in items:
        name = ctx.value(path, raw, string_value)
        if name in models:
            ctx.problems.add(path, f"duplicate model {show(raw)}")
        elif name is not None:
            models.append(name)
    return tuple(models)
