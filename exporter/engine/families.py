"""What each inference engine calls its metrics: the name tables, the canonical signals, and detection.

Every engine exposes the same few facts under different names, and renames them across versions. This
module maps them onto canonical ``Signal`` s so that the rest of the exporter never sees an engine's
own name. It is pure data plus two pure functions (``families_for`` and ``detect_kind``).

Names are written as the engine exposes them. ``prometheus_client``'s text parser strips ``_total``
from counter *family* names (``vllm:prompt_tokens_total`` parses as family ``vllm:prompt_tokens``, and
TGI's un-suffixed counter ``tgi_request_success`` gets sample name ``tgi_request_success_total``), so
names are compared through ``family_key``, which drops a trailing ``_total`` on both sides.

Where a signal has several names, the first one present wins: new names come first, the names they
replaced after them.

Sources (names checked in the engines' own code, as stored by the project's code search):

vLLM (``vllm:``): ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``; labels ``model_name``,
``engine``; ``request_success`` also ``finished_reason``), the older V0 ``vllm/engine/metrics.py`` and
``docs/design/v1/metrics.md`` (the V0 list). ``gpu_cache_usage_perc`` was "Deprecated in 0.9 - Renamed
as vllm:kv_cache_usage_perc"; both are a 0-1 fraction despite ``_perc`` ("1 means 100 percent usage").
``time_per_output_token_seconds`` (per token) was succeeded by ``inter_token_latency_seconds``.

SGLang (``sglang:``): ``python/sglang/srt/metrics/collector.py`` (``SchedulerMetricsCollector`` gauges
``num_running_reqs``, ``num_queue_reqs``, ``token_usage`` (0-1 fraction of the KV token pool), the
counter ``num_retracted_requests_total`` (a retraction is SGLang's preemption), the histogram
``queue_time_seconds``; ``TokenizerMetricsCollector`` counters ``prompt_tokens_total``,
``generation_tokens_total``, ``num_requests_total`` (finished requests) and histograms
``time_to_first_token_seconds``, ``inter_token_latency_seconds``, ``e2e_request_latency_seconds``) and
``docs/references/production_metrics.md`` (older builds: ``time_per_output_token_seconds``).

TGI (``tgi_``): ``docs/source/reference/metrics.md`` and ``router/src/server.rs`` (``metrics::`` crate
calls). TGI has no server-side TTFT and no KV-cache gauge. ``tgi_request_mean_time_per_token_duration``
is one observation per request (its mean decode time per token), not one per token, so its quantiles
are quantiles over requests. Token counts exist only as the histograms ``tgi_request_input_length`` and
``tgi_request_generated_tokens``; their ``_sum`` is the running token total, read as a counter here.

llama.cpp server (``llamacpp:``): ``tools/server/server-task.cpp`` (``to_metrics``; earlier
``examples/server/server.cpp``): counters ``prompt_tokens_total``, ``tokens_predicted_total``,
``prompt_seconds_total``, ``tokens_predicted_seconds_total``, ``n_decode_total``; gauges
``requests_processing``, ``requests_deferred``; ``kv_cache_usage_ratio`` only in older builds. No
labels, no histograms, no success counter. Builds before the ``llamacpp:`` prefix are not recognised.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum

AUTO = "auto"


class Signal(StrEnum):
    """A fact about the engine, in base units, whatever the engine calls it."""

    QUEUE_DEPTH = "queue_depth"  # requests waiting to be scheduled
    RUNNING_REQUESTS = "running_requests"
    KV_CACHE_USAGE = "kv_cache_usage"  # 0-1
    PREEMPTIONS_TOTAL = "preemptions_total"
    PROMPT_TOKENS_TOTAL = "prompt_tokens_total"
    GENERATION_TOKENS_TOTAL = "generation_tokens_total"
    REQUEST_SUCCESS_TOTAL = "request_success_total"
    SERVER_TTFT_SECONDS = "server_ttft_seconds"
    SERVER_ITL_SECONDS = "server_itl_seconds"
    SERVER_E2E_SECONDS = "server_e2e_seconds"
    SERVER_QUEUE_SECONDS = "server_queue_seconds"


class SignalType(Enum):
    """How a signal's values behave over time, which decides how a window derives figures from it."""

    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


SIGNAL_TYPES: Mapping[Signal, SignalType] = {
    Signal.QUEUE_DEPTH: SignalType.GAUGE,
    Signal.RUNNING_REQUESTS: SignalType.GAUGE,
    Signal.KV_CACHE_USAGE: SignalType.GAUGE,
    Signal.PREEMPTIONS_TOTAL: SignalType.COUNTER,
    Signal.PROMPT_TOKENS_TOTAL: SignalType.COUNTER,
    Signal.GENERATION_TOKENS_TOTAL: SignalType.COUNTER,
    Signal.REQUEST_SUCCESS_TOTAL: SignalType.COUNTER,
    Signal.SERVER_TTFT_SECONDS: SignalType.HISTOGRAM,
    Signal.SERVER_ITL_SECONDS: SignalType.HISTOGRAM,
    Signal.SERVER_E2E_SECONDS: SignalType.HISTOGRAM,
    Signal.SERVER_QUEUE_SECONDS: SignalType.HISTOGRAM,
}


# Signals that are a fraction of one pool per label set (one KV cache per vLLM engine core): label sets
# are averaged, which is the whole fleet's usage when the pools are of equal size, instead of summed.
AVERAGED_SIGNALS: frozenset[Signal] = frozenset({Signal.KV_CACHE_USAGE})


class Unit(Enum):
    """The unit an engine reports a value in; ``to_canonical`` converts it to the signal's base unit."""

    SAME = 1.0
    PERCENT = 0.01


@dataclass(frozen=True)
class Source:
    """Where one signal comes from in one engine: candidate names (first present wins) and unit."""

    names: tuple[str, ...]
    unit: Unit = Unit.SAME
    # The value is the ``_sum`` of a histogram of per-request counts (TGI's token histograms).
    from_histogram_sum: bool = False

    def __post_init__(self) -> None:
        if not self.names:
            raise ValueError("a Source needs at least one metric name")


@dataclass(frozen=True)
class EngineFamilies:
    """One engine kind's name table."""

    kind: str
    prefix: str
    sources: Mapping[Signal, Source] = field(default_factory=dict)

    def known_keys(self) -> frozenset[str]:
        """Every family key this table can read, for detection."""
        return frozenset(family_key(name) for source in self.sources.values() for name in source.names)


def family_key(name: str) -> str:
    """The name as compared: without a trailing ``_total``, which the parser may or may not strip."""
    return name.removesuffix("_total")


def to_canonical(value: float, unit: Unit) -> float:
    """``value`` reported in ``unit``, in the signal's base unit (percent becomes a 0-1 ratio)."""
    return value * unit.value


def _src(*names: str, unit: Unit = Unit.SAME, from_histogram_sum: bool = False) -> Source:
    return Source(names, unit, from_histogram_sum)


VLLM = EngineFamilies(
    "vllm",
    "vllm:",
    {
        Signal.QUEUE_DEPTH: _src("vllm:num_requests_waiting"),
        Signal.RUNNING_REQUESTS: _src("vllm:num_requests_running"),
        Signal.KV_CACHE_USAGE: _src("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        Signal.PREEMPTIONS_TOTAL: _src("vllm:num_preemptions_total"),
        Signal.PROMPT_TOKENS_TOTAL: _src("vllm:prompt_tokens_total"),
        Signal.GENERATION_TOKENS_TOTAL: _src("vllm:generation_tokens_total"),
        Signal.REQUEST_SUCCESS_TOTAL: _src("vllm:request_success_total"),
        Signal.SERVER_TTFT_SECONDS: _src("vllm:time_to_first_token_seconds"),
        Signal.SERVER_ITL_SECONDS: _src(
            "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"
        ),
        Signal.SERVER_E2E_SECONDS: _src("vllm:e2e_request_latency_seconds"),
        Signal.SERVER_QUEUE_SECONDS: _src("vllm:request_queue_time_seconds"),
    },
)

SGLANG = EngineFamilies(
    "sglang",
    "sglang:",
    {
        Signal.QUEUE_DEPTH: _src("sglang:num_queue_reqs"),
        Signal.RUNNING_REQUESTS: _src("sglang:num_running_reqs"),
        Signal.KV_CACHE_USAGE: _src("sglang:token_usage"),
        Signal.PREEMPTIONS_TOTAL: _src("sglang:num_retracted_requests_total"),
        Signal.PROMPT_TOKENS_TOTAL: _src("sglang:prompt_tokens_total"),
        Signal.GENERATION_TOKENS_TOTAL: _src("sglang:generation_tokens_total"),
        Signal.REQUEST_SUCCESS_TOTAL: _src("sglang:num_requests_total"),
        Signal.SERVER_TTFT_SECONDS: _src("sglang:time_to_first_token_seconds"),
        Signal.SERVER_ITL_SECONDS: _src(
            "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"
        ),
        Signal.SERVER_E2E_SECONDS: _src("sglang:e2e_request_latency_seconds"),
        Signal.SERVER_QUEUE_SECONDS: _src("sglang:queue_time_seconds"),
    },
)

TGI = EngineFamilies(
    "tgi",
    "tgi_",
    {
        Signal.QUEUE_DEPTH: _src("tgi_queue_size"),
        Signal.RUNNING_REQUESTS: _src("tgi_batch_current_size"),
        Signal.PROMPT_TOKENS_TOTAL: _src("tgi_request_input_length", from_histogram_sum=True),
        Signal.GENERATION_TOKENS_TOTAL: _src("tgi_request_generated_tokens", from_histogram_sum=True),
        Signal.REQUEST_SUCCESS_TOTAL: _src("tgi_request_success"),
        Signal.SERVER_ITL_SECONDS: _src("tgi_request_mean_time_per_token_duration"),
        Signal.SERVER_E2E_SECONDS: _src("tgi_request_duration"),
        Signal.SERVER_QUEUE_SECONDS: _src("tgi_request_queue_duration"),
    },
)

LLAMACPP = EngineFamilies(
    "llamacpp",
    "llamacpp:",
    {
        Signal.QUEUE_DEPTH: _src("llamacpp:requests_deferred"),
        Signal.RUNNING_REQUESTS: _src("llamacpp:requests_processing"),
        Signal.KV_CACHE_USAGE: _src("llamacpp:kv_cache_usage_ratio"),
        Signal.PROMPT_TOKENS_TOTAL: _src("llamacpp:prompt_tokens_total"),
        Signal.GENERATION_TOKENS_TOTAL: _src("llamacpp:tokens_predicted_total"),
    },
)

ENGINES: Mapping[str, EngineFamilies] = {table.kind: table for table in (VLLM, SGLANG, TGI, LLAMACPP)}
VALID_KINDS: tuple[str, ...] = (AUTO, *sorted(ENGINES))


class UnknownEngineError(ValueError):
    """The engine kind could not be chosen: a misspelt kind, or a scrape that matches no table."""


def families_for(kind: str) -> EngineFamilies:
    """The name table of an explicit engine ``kind`` (not ``auto``)."""
    try:
        return ENGINES[kind]
    except KeyError:
        raise UnknownEngineError(f'unknown engine kind "{kind}"; valid: {", ".join(VALID_KINDS)}') from None


def detect_kind(present: Iterable[str]) -> EngineFamilies:
    """The table that recognises the most of the ``present`` family names.

    A tie between engines with at least one match is an error rather than a guess, because a gateway
    re-exporting two engines' metrics needs an explicit kind.
    """
    keys = {family_key(name) for name in present}
    scores = {kind: len(keys & table.known_keys()) for kind, table in ENGINES.items()}
    best = max(scores.values())
    winners = sorted(kind for kind, score in scores.items() if score == best)
    if best == 0:
        prefixes = ", ".join(table.prefix for table in ENGINES.values())
        raise UnknownEngineError(f"no known engine metrics found (looked for prefixes {prefixes})")
    if len(winners) > 1:
        raise UnknownEngineError(
            f"metrics match several engines equally ({', '.join(winners)}); set the engine kind"
        )
    return ENGINES[winners[0]]


def resolve_families(kind: str, present: Iterable[str]) -> EngineFamilies:
    """The table for ``kind``, detecting it from the ``present`` family names when it is ``auto``."""
    return detect_kind(present) if kind == AUTO else families_for(kind)
