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

Later renames. vLLM 0.9.2 renamed ``gpu_cache_usage_perc`` to ``kv_cache_usage_perc`` and dropped
the old name in 0.12; ``time_per_output_token_seconds`` was deprecated in 0.11 and removed in 0.13, which
leaves ``inter_token_latency_seconds`` (per token) and ``request_time_per_output_token_seconds`` (one
observation per request: ``(e2e - TTFT) / (output tokens - 1)``, read as ``SERVER_TPOT_SECONDS``). SGLang
behind its router exposes the same families as ``sglang_*`` (as deployed behind it; dashboards and clients
written against such deployments use ``sglang_time_to_first_token_seconds`` and the like, and a pipeline
that cannot carry ``:`` in names, such as OpenTelemetry's Prometheus translation, gives the same), so
every SGLang name is tried in both spellings, ``sglang:`` first.

Gateways are tables of their own (``GATEWAYS``), read from a separate scrape, so that a sidecar behind a
gateway keeps the engine's view and the gateway's apart. The Kubernetes Gateway API inference extension's
endpoint picker, now llm-d's router (``pkg/epp/metrics/llm_d_router_metrics.go``, ``docs/metrics.md`` and
``pkg/epp/framework/plugins/requestcontrol/dataproducer/predictedlatency/metrics.go`` in llm-d/llm-d-router),
exports ``llm_d_epp_*``: ``request_ttft_seconds`` (request received to first response byte; label
``streaming``, and a non-streaming request's TTFT is its whole duration, so only ``streaming="true"`` is
read), ``request_streaming_itl_seconds`` (between response body chunks), ``request_streaming_tpot_seconds``
(``(e2e - TTFT) / (output tokens - 1)`` per request), ``request_duration_seconds``, ``request_total``,
``request_error_total``, ``request_running`` and ``request_slo_violation_total`` (label ``type``: ttft or
tpot). Earlier releases used ``inference_objective_*`` for the request families (still emitted beside the
new names); they are read after the new ones.
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
    PREFIX_CACHE_QUERIES_TOTAL = "prefix_cache_queries_total"  # prompt tokens looked up in the cache
    PREFIX_CACHE_HITS_TOTAL = "prefix_cache_hits_total"  # prompt tokens served from it
    SERVER_TTFT_SECONDS = "server_ttft_seconds"
    SERVER_ITL_SECONDS = "server_itl_seconds"
    SERVER_E2E_SECONDS = "server_e2e_seconds"
    SERVER_QUEUE_SECONDS = "server_queue_seconds"
    # One observation per request: (e2e - TTFT) / (output tokens - 1), what OpenTelemetry calls
    # gen_ai.server.time_per_output_token. Kept apart from ITL, which has one observation per token.
    SERVER_TPOT_SECONDS = "server_tpot_seconds"
    # Gateways: requests routed and failed, and the gateway's own SLO verdicts.
    REQUESTS_TOTAL = "requests_total"
    REQUEST_ERRORS_TOTAL = "request_errors_total"
    SLO_VIOLATIONS_TOTAL = "slo_violations_total"


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
    Signal.PREFIX_CACHE_QUERIES_TOTAL: SignalType.COUNTER,
    Signal.PREFIX_CACHE_HITS_TOTAL: SignalType.COUNTER,
    Signal.SERVER_TTFT_SECONDS: SignalType.HISTOGRAM,
    Signal.SERVER_ITL_SECONDS: SignalType.HISTOGRAM,
    Signal.SERVER_E2E_SECONDS: SignalType.HISTOGRAM,
    Signal.SERVER_QUEUE_SECONDS: SignalType.HISTOGRAM,
    Signal.SERVER_TPOT_SECONDS: SignalType.HISTOGRAM,
    Signal.REQUESTS_TOTAL: SignalType.COUNTER,
    Signal.REQUEST_ERRORS_TOTAL: SignalType.COUNTER,
    Signal.SLO_VIOLATIONS_TOTAL: SignalType.COUNTER,
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
    # Only samples carrying every one of these label values count (the gateway's streaming TTFT).
    labels: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not self.names:
            raise ValueError("a Source needs at least one metric name")


@dataclass(frozen=True)
class EngineFamilies:
    """One engine (or gateway) kind's name table; ``prefixes`` are the spellings its names start with."""

    kind: str
    prefixes: tuple[str, ...]
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


def _src(
    *names: str,
    unit: Unit = Unit.SAME,
    from_histogram_sum: bool = False,
    labels: tuple[tuple[str, str], ...] = (),
) -> Source:
    return Source(names, unit, from_histogram_sum, labels)


def _sglang(*names: str) -> Source:
    """SGLang's ``sglang:`` names, each followed by its ``sglang_`` spelling (behind the router)."""
    return Source(tuple(spelling for name in names for spelling in (name, name.replace(":", "_", 1))))


VLLM = EngineFamilies(
    "vllm",
    ("vllm:",),
    {
        Signal.QUEUE_DEPTH: _src("vllm:num_requests_waiting"),
        Signal.RUNNING_REQUESTS: _src("vllm:num_requests_running"),
        Signal.KV_CACHE_USAGE: _src("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        Signal.PREEMPTIONS_TOTAL: _src("vllm:num_preemptions_total"),
        Signal.PROMPT_TOKENS_TOTAL: _src("vllm:prompt_tokens_total"),
        Signal.GENERATION_TOKENS_TOTAL: _src("vllm:generation_tokens_total"),
        Signal.REQUEST_SUCCESS_TOTAL: _src("vllm:request_success_total"),
        # Counted in tokens; vLLM V1 before 0.10 spelled them with gpu_.
        Signal.PREFIX_CACHE_QUERIES_TOTAL: _src(
            "vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"
        ),
        Signal.PREFIX_CACHE_HITS_TOTAL: _src(
            "vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"
        ),
        Signal.SERVER_TTFT_SECONDS: _src("vllm:time_to_first_token_seconds"),
        Signal.SERVER_ITL_SECONDS: _src(
            "vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"
        ),
        Signal.SERVER_E2E_SECONDS: _src("vllm:e2e_request_latency_seconds"),
        Signal.SERVER_QUEUE_SECONDS: _src("vllm:request_queue_time_seconds"),
        Signal.SERVER_TPOT_SECONDS: _src("vllm:request_time_per_output_token_seconds"),
    },
)

SGLANG = EngineFamilies(
    "sglang",
    ("sglang:", "sglang_"),
    {
        Signal.QUEUE_DEPTH: _sglang("sglang:num_queue_reqs"),
        Signal.RUNNING_REQUESTS: _sglang("sglang:num_running_reqs"),
        Signal.KV_CACHE_USAGE: _sglang("sglang:token_usage"),
        Signal.PREEMPTIONS_TOTAL: _sglang("sglang:num_retracted_requests_total"),
        Signal.PROMPT_TOKENS_TOTAL: _sglang("sglang:prompt_tokens_total"),
        Signal.GENERATION_TOKENS_TOTAL: _sglang("sglang:generation_tokens_total"),
        Signal.REQUEST_SUCCESS_TOTAL: _sglang("sglang:num_requests_total"),
        Signal.SERVER_TTFT_SECONDS: _sglang("sglang:time_to_first_token_seconds"),
        Signal.SERVER_ITL_SECONDS: _sglang(
            "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"
        ),
        Signal.SERVER_E2E_SECONDS: _sglang("sglang:e2e_request_latency_seconds"),
        Signal.SERVER_QUEUE_SECONDS: _sglang("sglang:queue_time_seconds"),
    },
)

TGI = EngineFamilies(
    "tgi",
    ("tgi_",),
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
    ("llamacpp:",),
    {
        Signal.QUEUE_DEPTH: _src("llamacpp:requests_deferred"),
        Signal.RUNNING_REQUESTS: _src("llamacpp:requests_processing"),
        Signal.KV_CACHE_USAGE: _src("llamacpp:kv_cache_usage_ratio"),
        Signal.PROMPT_TOKENS_TOTAL: _src("llamacpp:prompt_tokens_total"),
        Signal.GENERATION_TOKENS_TOTAL: _src("llamacpp:tokens_predicted_total"),
        # Its prompt counter leaves the cached tokens out: queries are the two together (see the docs).
        Signal.PREFIX_CACHE_HITS_TOTAL: _src("llamacpp:prompt_tokens_cached_total"),
    },
)

LLM_D_EPP = EngineFamilies(
    "llm-d-epp",
    ("llm_d_epp_", "inference_objective_"),
    {
        Signal.RUNNING_REQUESTS: _src("llm_d_epp_request_running", "inference_objective_running_requests"),
        Signal.REQUESTS_TOTAL: _src("llm_d_epp_request_total", "inference_objective_request_total"),
        Signal.REQUEST_ERRORS_TOTAL: _src(
            "llm_d_epp_request_error_total", "inference_objective_request_error_total"
        ),
        Signal.SLO_VIOLATIONS_TOTAL: _src(
            "llm_d_epp_request_slo_violation_total", "inference_objective_request_slo_violation_total"
        ),
        # A non-streaming request's TTFT is its whole duration; the probes stream, so only streaming.
        Signal.SERVER_TTFT_SECONDS: _src("llm_d_epp_request_ttft_seconds", labels=(("streaming", "true"),)),
        Signal.SERVER_ITL_SECONDS: _src("llm_d_epp_request_streaming_itl_seconds"),
        Signal.SERVER_TPOT_SECONDS: _src("llm_d_epp_request_streaming_tpot_seconds"),
        Signal.SERVER_E2E_SECONDS: _src(
            "llm_d_epp_request_duration_seconds", "inference_objective_request_duration_seconds"
        ),
    },
)

ENGINES: Mapping[str, EngineFamilies] = {table.kind: table for table in (VLLM, SGLANG, TGI, LLAMACPP)}
VALID_KINDS: tuple[str, ...] = (AUTO, *sorted(ENGINES))
GATEWAYS: Mapping[str, EngineFamilies] = {table.kind: table for table in (LLM_D_EPP,)}
VALID_GATEWAY_KINDS: tuple[str, ...] = (AUTO, *sorted(GATEWAYS))


class UnknownEngineError(ValueError):
    """The engine kind could not be chosen: a misspelt kind, or a scrape that matches no table."""


@dataclass(frozen=True)
class Catalogue:
    """A set of name tables that one scrape chooses from: the engines, or the gateways."""

    noun: str  # what a kind names, for messages: "engine" or "gateway"
    tables: Mapping[str, EngineFamilies]

    @property
    def valid_kinds(self) -> tuple[str, ...]:
        """``auto`` and every kind, sorted: the choices a config offers."""
        return (AUTO, *sorted(self.tables))

    def families_for(self, kind: str) -> EngineFamilies:
        """The name table of an explicit ``kind`` (not ``auto``)."""
        try:
            return self.tables[kind]
        except KeyError:
            valid = ", ".join(self.valid_kinds)
            raise UnknownEngineError(f'unknown {self.noun} kind "{kind}"; valid: {valid}') from None

    def detect(self, present: Iterable[str]) -> EngineFamilies:
        """The table that recognises the most of the ``present`` family names.

        A tie between tables with at least one match is an error rather than a guess, because a
        gateway re-exporting two engines' metrics needs an explicit kind.
        """
        keys = {family_key(name) for name in present}
        scores = {kind: len(keys & table.known_keys()) for kind, table in self.tables.items()}
        best = max(scores.values())
        winners = sorted(kind for kind, score in scores.items() if score == best)
        if best == 0:
            prefixes = ", ".join(p for table in self.tables.values() for p in table.prefixes)
            raise UnknownEngineError(f"no known {self.noun} metrics found (looked for prefixes {prefixes})")
        if len(winners) > 1:
            raise UnknownEngineError(
                f"metrics match several {self.noun}s equally ({', '.join(winners)}); set the {self.noun} kind"
            )
        return self.tables[winners[0]]


ENGINE_CATALOGUE = Catalogue("engine", ENGINES)
GATEWAY_CATALOGUE = Catalogue("gateway", GATEWAYS)


def families_for(kind: str) -> EngineFamilies:
    """The name table of an explicit engine ``kind`` (not ``auto``)."""
    return ENGINE_CATALOGUE.families_for(kind)


def detect_kind(present: Iterable[str]) -> EngineFamilies:
    """The engine table that recognises the most of the ``present`` family names (see ``Catalogue``)."""
    return ENGINE_CATALOGUE.detect(present)
