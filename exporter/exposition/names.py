"""Every metric name, label name and HELP text the exporter exposes, in one place.

Conventions (Prometheus' "writing exporters" and naming guides): one namespace, ``fluidity_``; base
units in the name (``_seconds``, ``_ratio`` for 0-1); counters end in ``_total``, with failures as a
separate counter or an ``outcome`` label whose values are all exported from the start; no per-pod
labels (``instance`` and ``job`` come from Prometheus' scrape). Probe families are histograms and
counters so that many sidecars aggregate exactly in PromQL; the few pre-computed figures are gauges
whose names start ``fluidity_window_`` (or ``fluidity_engine_window_``, ``fluidity_gateway_window_``) so that nobody mistakes them
for something that can be summed or averaged across sidecars.

Names that differ from the obvious ones, and why:

* ``fluidity_window_fluid_tokens_per_second`` (was ``..._fluid_token_rate``): the unit belongs in the name.
* the ``job`` label of the scheduler self-metrics is ``job_id``: ``job`` is the label Prometheus attaches
  to every scraped series, and a metric's own ``job`` would be renamed ``exported_job`` on ingestion.
* ``fluidity_exporter_engine_scrapes_total`` and ``..._scrape_errors_total`` carry ``target`` too:
  "which engine fails to answer" is the first question when the error count rises.
* ``fluidity_capacity_fluid_tokens_per_second`` (was ``..._fluid_token_rate_tokens_per_second``): named
  like its window twin, ``fluidity_window_fluid_tokens_per_second``.

Job results (``fluidity_capacity_*``, ``fluidity_prefill_profile_*``) are gauges of the latest finished
job, not of scheduled probes: a capacity search is minutes of heavy load, run on demand or nightly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

NAMESPACE: Final = "fluidity"

# Label names.
TARGET: Final = "target"
MODULE: Final = "module"
OUTCOME: Final = "outcome"
TIER: Final = "tier"
WINDOW: Final = "window"
PERCENTILE: Final = "percentile"
SLO: Final = "slo"
JOB_ID: Final = "job_id"
REASON: Final = "reason"
VERSION: Final = "version"
PYTHON_VERSION: Final = "python_version"
KIND: Final = "kind"  # of a job: capacity, prefill-profile
STATE: Final = "state"  # how a job ended
TRIAL: Final = "trial"  # index of a capacity-search trial, from 1
ESTIMATE: Final = "end"  # of the engine model's predicted capacity: estimate, low, high (its interval)
AT: Final = "at"  # where a capacity cost figure was measured: capacity, highest_load
PROMPT_TOKENS: Final = "prompt_tokens"
ENGINE: Final = "engine"  # the engine whose metric names were recognised: vllm, sglang, tgi, llamacpp
GATEWAY: Final = "gateway"  # the gateway whose metric names were recognised: llm-d-epp
TURN: Final = "turn"  # of a multi-turn session: first or followup (bounded: never the turn number)
TURN_KINDS: Final = ("first", "followup")
STORE: Final = "store"  # what a state_dir folder keeps: jobs (the job history), profiles (prefill profiles)
BOUND: Final = "bound"  # the side a percentile's buckets bound it from: upper (bucket from 0), lower (+Inf)
MODEL: Final = "model"  # of real traffic: a model of traffic.models, else "other" (bounded)
API: Final = "api"  # of real traffic: chat, completions or responses
TOKEN_SOURCE: Final = "token_source"  # of real traffic's output tokens: streams.result.TokenSource's values
SOURCE: Final = "source"  # of real traffic's prompt tokens: usage (reported) or estimated
SIDE: Final = "side"  # of a probe request only one of the client and the observer saw

MetricType = Literal["counter", "gauge", "histogram", "info"]

SERIES: Final = (TARGET, MODULE)
"""The labels of every per-probe family: which endpoint, probed with which module."""

# The window label of the figures ``/probe`` computes over the one probe it ran.
PROBE_WINDOW: Final = "probe"

# True of both endpoints: /metrics counts the scheduled probes, /probe the one probe it just ran.
_CACHED = "Counted over completed probe runs (on /probe: this probe alone), not measured at scrape time."
_WINDOW = (
    'Computed at scrape time over the requests of the rolling window (on /probe: window="probe", this '
    "probe's requests); do not sum across sidecars."
)


@dataclass(frozen=True)
class MetricSpec:
    """A metric family as exposed: full name (counters with ``_total``), type, HELP text, labels."""

    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()


# --- Per (target, module): histograms of every completed request, cumulative since start ------------

PROBE_TTFT = MetricSpec(
    "fluidity_probe_ttft_seconds",
    "histogram",
    f"Time to first token of completed probe requests, from the request write. {_CACHED}",
    SERIES,
)
PROBE_TBT = MetricSpec(
    "fluidity_probe_tbt_seconds",
    "histogram",
    "Time between tokens: every gap after the first token of completed probe requests (tokens of one "
    f"chunk after the first count as 0 s gaps). {_CACHED}",
    SERIES,
)
PROBE_TPOT = MetricSpec(
    "fluidity_probe_tpot_seconds",
    "histogram",
    f"Time per output token, (E2E - TTFT) / (tokens - 1), of completed probe requests with 2+ tokens. {_CACHED}",
    SERIES,
)
PROBE_E2E = MetricSpec(
    "fluidity_probe_e2e_seconds",
    "histogram",
    f"End-to-end latency of completed probe requests, request write to end of stream. {_CACHED}",
    SERIES,
)
PROBE_NORMALIZED_LATENCY = MetricSpec(
    "fluidity_probe_normalized_latency_seconds",
    "histogram",
    f"End-to-end latency divided by output tokens, per completed probe request. {_CACHED}",
    SERIES,
)
PROBE_FLUIDITY = MetricSpec(
    "fluidity_probe_fluidity_index",
    "histogram",
    "Etalon fluidity-index (0-1, 1 = every token deadline met) of each completed probe request, per "
    f"decode-deadline tier. {_CACHED}",
    (*SERIES, TIER),
)

# --- Per (target, module): counters ------------------------------------------------------------------

PROBE_REQUESTS = MetricSpec(
    "fluidity_probe_requests_total",
    "counter",
    f"Probe requests by how they ended (ok, or the failure reason). {_CACHED}",
    (*SERIES, OUTCOME),
)
PROBE_RETRIES = MetricSpec(
    "fluidity_probe_retries_total",
    "counter",
    "Probe requests resent once on a fresh connection because a reused keep-alive connection failed "
    "before any response byte (the server closed it while idle; llama.cpp and uvicorn do after 5 s). "
    f"The resent request is the one counted in fluidity_probe_requests_total. {_CACHED}",
    SERIES,
)
PROBE_UNRELIABLE = MetricSpec(
    "fluidity_probe_unreliable_requests_total",
    "counter",
    "Probe requests whose timings the probe's own client flagged unreliable: it read chunks of a stream "
    "that may have come more than 3 ms apart together while its event loop was late (or too many of "
    "them), or, without kernel stamps, its loop was late; such requests are in every other probe metric "
    "all the same, so divide by "
    f"fluidity_probe_requests_total before trusting their tails. {_CACHED}",
    SERIES,
)
PROBE_OUTPUT_TOKENS = MetricSpec(
    "fluidity_probe_output_tokens_total",
    "counter",
    f"Output tokens received by completed probe requests. {_CACHED}",
    SERIES,
)
PROBE_DEADLINES = MetricSpec(
    "fluidity_probe_deadlines_total",
    "counter",
    "Token deadlines of completed probe requests per tier (a stall counts every deadline it spans); "
    f"1 - rate(missed) / rate(this) is the service-level fluidity. {_CACHED}",
    (*SERIES, TIER),
)
PROBE_DEADLINES_MISSED = MetricSpec(
    "fluidity_probe_deadlines_missed_total",
    "counter",
    f"Token deadlines missed by completed probe requests per tier. {_CACHED}",
    (*SERIES, TIER),
)
PROBE_GOOD_REQUESTS = MetricSpec(
    "fluidity_probe_good_requests_total",
    "counter",
    "Probe requests that met every configured goodput bound (failed requests never do); divide by "
    f"fluidity_probe_requests_total for the goodput ratio. {_CACHED}",
    SERIES,
)
# --- Per (target, module, turn): first turns of sessions apart from follow-ups ----------------------

_TURN = (
    'turn="first" is a session\'s first request (and every single-turn request), turn="followup" a later '
    "turn that re-sends the conversation so far."
)
PROBE_TURN_TTFT = MetricSpec(
    "fluidity_probe_turn_ttft_seconds",
    "histogram",
    f"Time to first token of completed probe requests by turn (its _count: the completed requests). {_TURN} "
    f"{_CACHED}",
    (*SERIES, TURN),
)
PROBE_PROMPT_TOKENS = MetricSpec(
    "fluidity_probe_prompt_tokens_total",
    "counter",
    "Prompt tokens of probe requests whose server reported how many of them it served from its prefix "
    f"cache, by turn. {_TURN} {_CACHED}",
    (*SERIES, TURN),
)
PROBE_PROMPT_CACHED_TOKENS = MetricSpec(
    "fluidity_probe_prompt_cached_tokens_total",
    "counter",
    "Prompt tokens the server reported as served from its prefix cache (usage.prompt_tokens_details."
    "cached_tokens, llama.cpp's timings.cache_n), by turn; divide by fluidity_probe_prompt_tokens_total "
    f"for the hit ratio. {_TURN} {_CACHED}",
    (*SERIES, TURN),
)
PROBE_LAST_SUCCESS = MetricSpec(
    "fluidity_probe_last_success_timestamp_seconds",
    "gauge",
    f"Unix time when a probe run last stored at least one completed request. {_CACHED}",
    SERIES,
)
PROBE_LAST_RUN_OK = MetricSpec(
    "fluidity_probe_last_run_ok_ratio",
    "gauge",
    'Share of the requests of the latest probe run that ended ok (outcome="ok"), held until the next '
    "run: a state that does not lapse between the runs of a module probed less often than an alert's "
    f"window (FluidityTargetDown reads it). Absent before the first run. {_CACHED}",
    SERIES,
)

# --- Per (target, module, window): figures over the rolling window --------------------------------

WINDOW_REQUESTS = MetricSpec(
    "fluidity_window_requests",
    "gauge",
    f"Probe requests in the rolling window by outcome. {_WINDOW}",
    (*SERIES, WINDOW, OUTCOME),
)
WINDOW_FLUIDITY = MetricSpec(
    "fluidity_window_fluidity_index",
    "gauge",
    'Percentiles of the fluidity-index of the window\'s completed requests: percentile="1" (p1) is the '
    "value that 99% of them reach or exceed (nearest rank), so with no failed request an SLO "
    "fluidity:p99>=X holds exactly when it is >= X (fluidity_window_slo_met also counts the failed "
    f"ones, at fluidity 0). {_WINDOW}",
    (*SERIES, WINDOW, TIER, PERCENTILE),
)
WINDOW_SERVICE_LEVEL = MetricSpec(
    "fluidity_window_service_level_ratio",
    "gauge",
    "Token-weighted fluidity of the window's completed requests: 1 - missed deadlines / deadlines, per "
    f"tier; failed requests are not in it (see fluidity_window_requests), none completed: absent. {_WINDOW}",
    (*SERIES, WINDOW, TIER),
)
WINDOW_FLUID_RATE = MetricSpec(
    "fluidity_window_fluid_tokens_per_second",
    "gauge",
    "Fluid token generation rate: the highest playback rate at which the configured percentile of "
    f"the window's completed requests reach the target decode-only fluidity. {_WINDOW}",
    (*SERIES, WINDOW),
)
WINDOW_SLO_MET = MetricSpec(
    "fluidity_window_slo_met",
    "gauge",
    "1 when the SLO holds over the window's probe requests, 0 when not; a failed request counts at the "
    "worst value of every metric (fluidity 0, latency infinite), as bench --objective and capacity "
    f"trials judge it; absent without a request. {_WINDOW}",
    (*SERIES, WINDOW, SLO),
)
WINDOW_GOODPUT = MetricSpec(
    "fluidity_window_goodput_ratio",
    "gauge",
    f"Share of the window's probe requests (failed ones included) that met every goodput bound. {_WINDOW}",
    (*SERIES, WINDOW),
)
WINDOW_LATENESS = MetricSpec(
    "fluidity_window_probe_lateness_seconds",
    "gauge",
    "How late the prober itself sent requests after their scheduled time (nearest-rank percentile); "
    f"high values mean the exporter, not the target, is slow. {_WINDOW}",
    (*SERIES, WINDOW, PERCENTILE),
)
WINDOW_CLIENT_MINUS_SERVER_TTFT = MetricSpec(
    "fluidity_window_client_minus_server_ttft_seconds",
    "gauge",
    "Probe TTFT percentile minus the engine's own TTFT percentile over the window: network, gateways and "
    "queues the engine does not see. Bucket-resolution limited, can be negative; absent where the "
    "engine's percentile is only a bound (in a bucket starting at 0 or in +Inf; see "
    f"fluidity_engine_window_ttft_bound_seconds). {_WINDOW}",
    (*SERIES, WINDOW, PERCENTILE),
)
WINDOW_CLIENT_MINUS_SERVER_MEAN_TTFT = MetricSpec(
    "fluidity_window_client_minus_server_mean_ttft_seconds",
    "gauge",
    f"Mean probe TTFT minus the engine's exact mean TTFT over the window. {_WINDOW}",
    (*SERIES, WINDOW),
)

# /probe only: blackbox_exporter's two figures around a single probe.
PROBE_SUCCESS = MetricSpec(
    "fluidity_probe_success",
    "gauge",
    "1 when every request of this probe completed, else 0 (/probe only).",
    SERIES,
)
PROBE_DURATION = MetricSpec(
    "fluidity_probe_duration_seconds",
    "gauge",
    "How long this probe took, all requests included (/probe only).",
    SERIES,
)
PROBE_FAILURE = MetricSpec(
    "fluidity_probe_failure_info",
    "gauge",
    "1 with the reason this probe failed (a request outcome such as http_status or connect_error, or "
    "scrape_timeout, shutdown, backing_off, over_requests, over_tokens, over_context, busy, paused); absent "
    "when it succeeded (/probe only).",
    (*SERIES, REASON),
)

# --- Per target: the engine's own metrics, re-exported ----------------------------------------------

ENGINE_SCRAPE_SUCCESS = MetricSpec(
    "fluidity_engine_scrape_success",
    "gauge",
    "1 when the latest scrape of the engine's /metrics succeeded, else 0; the other fluidity_engine_ "
    "series are absent while it is 0.",
    (TARGET,),
)
ENGINE_SCRAPE_DURATION = MetricSpec(
    "fluidity_engine_scrape_duration_seconds",
    "gauge",
    "How long the latest scrape of the engine's /metrics took.",
    (TARGET,),
)
ENGINE_INFO = MetricSpec(
    "fluidity_engine_info",
    "gauge",
    "Always 1 while the latest scrape succeeded; the engine label says whose metric names were "
    "recognised (set by engine_metrics.kind, or detected when it is auto).",
    (TARGET, ENGINE),
)
_ENGINE = "Read from the engine's own /metrics at its latest scrape."
ENGINE_QUEUE_DEPTH = MetricSpec(
    "fluidity_engine_queue_depth", "gauge", f"Requests waiting to be scheduled. {_ENGINE}", (TARGET,)
)
ENGINE_RUNNING = MetricSpec(
    "fluidity_engine_running_requests", "gauge", f"Requests being processed. {_ENGINE}", (TARGET,)
)
ENGINE_KV_CACHE_USAGE = MetricSpec(
    "fluidity_engine_kv_cache_usage_ratio", "gauge", f"KV-cache usage, 0-1. {_ENGINE}", (TARGET,)
)
ENGINE_PREEMPTIONS = MetricSpec(
    "fluidity_engine_preemptions_total",
    "counter",
    f"Preemptions (SGLang: retractions) since the engine started. {_ENGINE}",
    (TARGET,),
)
ENGINE_PROMPT_TOKENS = MetricSpec(
    "fluidity_engine_prompt_tokens_total", "counter", f"Prompt tokens processed. {_ENGINE}", (TARGET,)
)
ENGINE_PREFIX_CACHE_QUERIES = MetricSpec(
    "fluidity_engine_prefix_cache_queries_total",
    "counter",
    f"Prompt tokens the engine looked up in its prefix cache (vLLM). {_ENGINE}",
    (TARGET,),
)
ENGINE_PREFIX_CACHE_HITS = MetricSpec(
    "fluidity_engine_prefix_cache_hits_total",
    "counter",
    "Prompt tokens the engine served from its prefix cache (vLLM; llama.cpp's prompt_tokens_cached, whose "
    f"prompt tokens counter leaves them out). {_ENGINE}",
    (TARGET,),
)
ENGINE_GENERATION_TOKENS = MetricSpec(
    "fluidity_engine_generation_tokens_total", "counter", f"Tokens generated. {_ENGINE}", (TARGET,)
)
ENGINE_REQUEST_SUCCESS = MetricSpec(
    "fluidity_engine_request_success_total",
    "counter",
    f"Requests the engine finished. {_ENGINE}",
    (TARGET,),
)
_ENGINE_WINDOW = (
    "Interpolated from the engine's histogram increase over the window, as histogram_quantile does."
)


def _window_quantile(name: str, what: str, source: str) -> tuple[MetricSpec, MetricSpec]:
    """A percentile gauge over the window, and its twin ``..._bound_seconds`` for what it cannot publish.

    A percentile in a histogram's first bucket (from 0) or its +Inf bucket is only a bound: Prometheus'
    interpolation there reads like a measurement (a first bucket of 0.3 s makes a p50 of 0.15 s out of
    0.6 ms waits), so it goes to the twin, whose ``bound`` label says which side is known.
    """
    bound_name = f"{name.removesuffix('_seconds')}_bound_seconds"
    value = MetricSpec(
        name,
        "gauge",
        f"{what}, percentile over the window. {source} Present only where the percentile lies between "
        f"two finite bucket bounds above 0 (no finer than that bucket); else absent, and {bound_name} "
        "gives its bound.",
        (TARGET, WINDOW, PERCENTILE),
    )
    bound = MetricSpec(
        bound_name,
        "gauge",
        f"{what}: where its percentile over the window lies in a bucket starting at 0 or in the +Inf "
        f"bucket of the histogram, the bound those buckets give, in place of {name} (absent then); not a "
        'measurement. bound="upper": the percentile is at most this value (that bucket\'s upper bound); '
        'bound="lower": above this value (the highest finite bound).',
        (TARGET, WINDOW, PERCENTILE, BOUND),
    )
    return value, bound


ENGINE_WINDOW_TTFT, ENGINE_WINDOW_TTFT_BOUND = _window_quantile(
    "fluidity_engine_window_ttft_seconds", "Server-side time to first token", _ENGINE_WINDOW
)
ENGINE_WINDOW_ITL, ENGINE_WINDOW_ITL_BOUND = _window_quantile(
    "fluidity_engine_window_itl_seconds", "Server-side inter-token latency", _ENGINE_WINDOW
)
ENGINE_WINDOW_E2E, ENGINE_WINDOW_E2E_BOUND = _window_quantile(
    "fluidity_engine_window_e2e_seconds", "Server-side end-to-end request latency", _ENGINE_WINDOW
)
ENGINE_WINDOW_QUEUE, ENGINE_WINDOW_QUEUE_BOUND = _window_quantile(
    "fluidity_engine_window_queue_seconds", "Server-side time requests waited in the queue", _ENGINE_WINDOW
)
ENGINE_WINDOW_TPOT, ENGINE_WINDOW_TPOT_BOUND = _window_quantile(
    "fluidity_engine_window_tpot_seconds",
    "Server-side time per output token, (E2E - TTFT) / (tokens - 1) with one observation per request "
    "(vLLM's request_time_per_output_token_seconds)",
    _ENGINE_WINDOW,
)

# --- Per target: the gateway's view (llm-d's endpoint picker), from a second scrape -----------------

GATEWAY_SCRAPE_SUCCESS = MetricSpec(
    "fluidity_gateway_scrape_success",
    "gauge",
    "1 when the latest scrape of the gateway's /metrics succeeded, else 0; the other fluidity_gateway_ "
    "series are absent while it is 0.",
    (TARGET,),
)
GATEWAY_SCRAPE_DURATION = MetricSpec(
    "fluidity_gateway_scrape_duration_seconds",
    "gauge",
    "How long the latest scrape of the gateway's /metrics took.",
    (TARGET,),
)
GATEWAY_INFO = MetricSpec(
    "fluidity_gateway_info",
    "gauge",
    "Always 1 while the latest gateway scrape succeeded; the gateway label says whose metric names were "
    "recognised (set by gateway_metrics.kind, or detected when it is auto).",
    (TARGET, GATEWAY),
)
_GATEWAY = (
    "Read from the gateway's /metrics at its latest scrape: every request it routed for the model, the "
    "probes' among them."
)
GATEWAY_RUNNING = MetricSpec(
    "fluidity_gateway_running_requests",
    "gauge",
    f"Requests the gateway has in flight. {_GATEWAY}",
    (TARGET,),
)
GATEWAY_REQUESTS = MetricSpec(
    "fluidity_gateway_requests_total",
    "counter",
    f"Requests the gateway processed. {_GATEWAY}",
    (TARGET,),
)
GATEWAY_REQUEST_ERRORS = MetricSpec(
    "fluidity_gateway_request_errors_total",
    "counter",
    f"Requests the gateway answered with an error. {_GATEWAY}",
    (TARGET,),
)
GATEWAY_SLO_VIOLATIONS = MetricSpec(
    "fluidity_gateway_slo_violations_total",
    "counter",
    "Requests that broke the gateway's own latency SLO (TTFT and TPOT violations together; llm-d's "
    f"predicted-latency plugin). {_GATEWAY}",
    (TARGET,),
)
_GATEWAY_WINDOW = (
    "Measured at the gateway (request received to response bytes), interpolated from its histogram "
    "increase over the window, as histogram_quantile does."
)
GATEWAY_WINDOW_TTFT, GATEWAY_WINDOW_TTFT_BOUND = _window_quantile(
    "fluidity_gateway_window_ttft_seconds",
    "Gateway time to first byte of streaming requests",
    _GATEWAY_WINDOW,
)
GATEWAY_WINDOW_ITL, GATEWAY_WINDOW_ITL_BOUND = _window_quantile(
    "fluidity_gateway_window_itl_seconds", "Gateway time between response body chunks", _GATEWAY_WINDOW
)
GATEWAY_WINDOW_TPOT, GATEWAY_WINDOW_TPOT_BOUND = _window_quantile(
    "fluidity_gateway_window_tpot_seconds",
    "Gateway time per output token of streaming requests, (E2E - TTFT) / (tokens - 1) per request",
    _GATEWAY_WINDOW,
)
GATEWAY_WINDOW_E2E, GATEWAY_WINDOW_E2E_BOUND = _window_quantile(
    "fluidity_gateway_window_e2e_seconds", "Gateway end-to-end request latency", _GATEWAY_WINDOW
)

# --- Job results: the latest capacity search per (target, module), the stored prefill profiles ------

_CAPACITY = "From the latest finished capacity search of this (target, module)."
# What a load that passed holds for: an engine near its knee fills its queue slowly (docs/capacity.md)
_BURSTS = "It holds for bursts as long as the search's trials: a load kept up for hours can queue below it."
# Where the figures of a search are measured: its lower end, a capacity only when it is found (trusted).
_AT_LOWER = (
    "at the load of fluidity_capacity_load_lower_bound (the capacity when fluidity_capacity_found is 1, "
    "else the highest load that passed: a lower bound, or a load whose timings the client distrusted, "
    "fluidity_capacity_unreliable_timings 1; not a measured capacity)"
)
# When the capacity gauges are exported: a measurement, its timings trusted by the client.
_MEASURED = (
    'present only when fluidity_capacity_state{state="found"} is 1 and '
    "fluidity_capacity_unreliable_timings is 0"
)
CAPACITY_RATE = MetricSpec(
    "fluidity_capacity_requests_per_second",
    "gauge",
    f"Highest arrival rate at which the SLO held (rate searches), a measurement: {_MEASURED}. {_BURSTS} "
    f"{_CAPACITY}",
    SERIES,
)
CAPACITY_CONCURRENCY = MetricSpec(
    "fluidity_capacity_concurrency",
    "gauge",
    "Highest number of requests in flight at which the SLO held (concurrency searches), a measurement: "
    f"{_MEASURED}. {_BURSTS} {_CAPACITY}",
    SERIES,
)
CAPACITY_FOUND = MetricSpec(
    "fluidity_capacity_found",
    "gauge",
    "1 when the search measured the capacity (state found, timings trusted), else 0: a lower bound, an "
    "inconclusive search, a search whose every load failed and one whose timings the client distrusted "
    f"all read 0 (fluidity_capacity_state and fluidity_capacity_unreliable_timings say which). {_CAPACITY}",
    SERIES,
)
CAPACITY_UNRELIABLE_TIMINGS = MetricSpec(
    "fluidity_capacity_unreliable_timings",
    "gauge",
    "1 when a trial at either end of the search's answer had more than 1% of its requests flagged "
    "unreliable by the probe's own client (it read chunks of a stream together while its loop was late, "
    "or was saturated: the bound bench fails a run at), else 0. Such a search exports no capacity and "
    "leaves the regression alert as it was; the job's result names the trials (unreliable_timings). "
    f"{_CAPACITY}",
    SERIES,
)
CAPACITY_STATE = MetricSpec(
    "fluidity_capacity_state",
    "gauge",
    "1 for how the search ended, 0 for the others: found (a confident pass below a confident failure, "
    "within the tolerance), lower_bound (still passing when the load ceiling, the trials or a budget "
    "stopped it), not_met (no load tried passed), inconclusive (bracketed, but an end's pass-fraction "
    f"interval straddles the objective). {_CAPACITY}",
    (*SERIES, STATE),
)
CAPACITY_STOPPED_BY = MetricSpec(
    "fluidity_capacity_stopped_by",
    "gauge",
    "1 for what ended the search, 0 for the others: converged (within the tolerance), floor (a failure "
    "at the lowest load it may try: with state not_met, the SLO is met at no load it can offer, the only "
    "not_met the regression alert reads as 0), max_load, max_trials, time_budget, max_tokens "
    "(jobs.limits.max_tokens); a not_met stopped by any but floor only says the capacity is below its "
    f"lowest failure. {_CAPACITY}",
    (*SERIES, REASON),
)
CAPACITY_LOWER_BOUND = MetricSpec(
    "fluidity_capacity_load_lower_bound",
    "gauge",
    "Highest load that passed below the lowest that failed (requests/s or requests in flight): the "
    "capacity when fluidity_capacity_found is 1, else what it is at least (timings distrusted included); "
    f"absent when no load passed. {_BURSTS} {_CAPACITY}",
    SERIES,
)
CAPACITY_UPPER_BOUND = MetricSpec(
    "fluidity_capacity_load_upper_bound",
    "gauge",
    "Lowest load that failed on its point verdict (requests/s or requests in flight; whether its failure "
    "is confident, fluidity_capacity_state says: found only when both ends are); absent when none failed. "
    f"{_CAPACITY}",
    SERIES,
)
CAPACITY_PREDICTED_LOAD = MetricSpec(
    "fluidity_capacity_predicted_load",
    "gauge",
    "The load the engine model fitted to the search's trials predicts the SLO stops being met at "
    "(requests/s; end=estimate), with its interval (end=low, end=high; widened to any load whose "
    "trial contradicted a prediction): information beside the answer; the search places no trial by it, "
    "and only measured trials give the answer (fluidity_capacity_load_lower_bound); absent for "
    "concurrency searches and "
    f"where the trials' gaps could not be fitted. {_CAPACITY}",
    (*SERIES, ESTIMATE),
)
CAPACITY_PREDICTION_ERROR = MetricSpec(
    "fluidity_capacity_prediction_error_ratio",
    "gauge",
    "How far the engine model's prediction lay from the measured lower bound: predicted / lower bound "
    f"- 1 (0.03: 3% above it); absent without both. {_CAPACITY}",
    SERIES,
)
CAPACITY_FLUID_GOODPUT = MetricSpec(
    "fluidity_capacity_fluid_goodput_tokens_per_second",
    "gauge",
    f"Output tokens per second of the requests that met the SLO (fluid), {_AT_LOWER} (at=capacity), "
    f"and at the highest load tried (at=highest_load). {_CAPACITY}",
    (*SERIES, AT),
)
CAPACITY_TOKENS_PER_GPU_SECOND = MetricSpec(
    "fluidity_capacity_fluid_tokens_per_gpu_second",
    "gauge",
    "Fluid goodput per GPU-second: fluidity_capacity_fluid_goodput_tokens_per_second over the target's "
    f"declared GPUs (targets[].gpus); absent without them. {_CAPACITY}",
    (*SERIES, AT),
)
CAPACITY_TOKEN_COST = MetricSpec(
    "fluidity_capacity_fluid_token_cost",
    "gauge",
    "Cost of one output token served within the SLO, in the currency of targets[].gpu_hour_price: "
    f"price / 3600 / fluid tokens per GPU-second (x 1e6 for a million); absent without a price. {_CAPACITY}",
    (*SERIES, AT),
)
TARGET_GPUS = MetricSpec(
    "fluidity_target_gpus",
    "gauge",
    "Accelerators the target declares (targets[].gpus, per replica): the denominator of every "
    "per-GPU-second figure, e.g. the engine's generated tokens per GPU-second, summed over the exporters "
    "(one per replica) on both sides: sum by (target) (rate(fluidity_engine_generation_tokens_total[5m])) "
    "/ sum by (target) (fluidity_target_gpus).",
    (TARGET,),
)
TARGET_SERVED_CONTEXT = MetricSpec(
    "fluidity_target_served_context_tokens",
    "gauge",
    # "10 minutes" is exporter.daemon.served_context.CONTEXT_REASK_S (a layer above: not importable here).
    "Context length the target serves, in tokens: max_model_len from its GET /v1/models, asked before its "
    "first probe, after each reload, before each probe while it does not answer, and again at most every "
    "10 minutes while it does not say, after an HTTP 400, or while a module cannot fit it. Scheduled and /probe runs keep each request's prompt + "
    "output within it (less 3% for approximate prompts) unless the module sets max_prompt_tokens; absent "
    "while the target has not said (then its probes are sent as configured).",
    (TARGET,),
)
PROBE_OVER_CONTEXT = MetricSpec(
    "fluidity_probe_over_context",
    "gauge",
    "1 while none of the requests of the module's probes can fit the context its target serves "
    "(prompt + output over fluidity_target_served_context_tokens): its probes are skipped, so nothing "
    "measures it (FluidityProbeOverContext reads it); absent otherwise.",
    SERIES,
)
CAPACITY_FLUID_RATE = MetricSpec(
    "fluidity_capacity_fluid_tokens_per_second",
    "gauge",
    f"Fluid token generation rate measured {_AT_LOWER}. {_CAPACITY}",
    SERIES,
)
CAPACITY_GOODPUT_RATIO = MetricSpec(
    "fluidity_capacity_goodput_ratio",
    "gauge",
    f"Share of requests that met every goodput bound {_AT_LOWER}. {_CAPACITY}",
    SERIES,
)
CAPACITY_GOODPUT_RATE = MetricSpec(
    "fluidity_capacity_goodput_requests_per_second",
    "gauge",
    f"Requests per second that met every goodput bound {_AT_LOWER}. {_CAPACITY}",
    SERIES,
)
CAPACITY_TIMESTAMP = MetricSpec(
    "fluidity_capacity_last_search_timestamp_seconds",
    "gauge",
    f"Unix time when the search finished. {_CAPACITY}",
    SERIES,
)
CAPACITY_TRIAL_LOAD = MetricSpec(
    "fluidity_capacity_trial_load",
    "gauge",
    "Load of each trial: requests per second for a rate search, requests in flight for a concurrency "
    f"search (the unit of fluidity_capacity_load_lower_bound). {_CAPACITY}",
    (*SERIES, TRIAL),
)
CAPACITY_TRIAL_PASSED = MetricSpec(
    "fluidity_capacity_trial_passed",
    "gauge",
    "1 when the trial passed on its point verdict (its measured share of fluid requests and every other "
    "objective met: what steers the search), else 0; a trial whose pass-fraction interval straddles the "
    "objective (interval verdict inconclusive) reads 1 when its point verdict passed. The interval "
    "verdict of each trial is no series: it is trials[].verdict (pass, fail, inconclusive) of the job "
    "(GET /api/v1/jobs/<id>); fluidity_capacity_state says whether the search's ends were confident. "
    f"{_CAPACITY}",
    (*SERIES, TRIAL),
)
CAPACITY_TRIAL_HEADROOM = MetricSpec(
    "fluidity_capacity_trial_slo_headroom",
    "gauge",
    "How much tighter every deadline of the SLO could have been with the trial still passing (the factor "
    f"they could be divided by): above 1 it passed with room to spare, below 1 it failed. {_CAPACITY}",
    (*SERIES, TRIAL),
)
PREFILL_PROFILE_PREDICTED = MetricSpec(
    "fluidity_prefill_profile_predicted_seconds",
    "gauge",
    "Prefill time the target's stored profile predicts for a prompt of prompt_tokens tokens (Dp(P) "
    "without the scheduling slack), at fixed reference lengths.",
    (TARGET, PROMPT_TOKENS),
)
PREFILL_PROFILE_TIMESTAMP = MetricSpec(
    "fluidity_prefill_profile_timestamp_seconds",
    "gauge",
    "Unix time when the target's stored prefill profile was measured.",
    (TARGET,),
)
JOBS_FINISHED = MetricSpec(
    "fluidity_jobs_finished_total",
    "counter",
    "Jobs (capacity searches, prefill profiles) finished since the exporter started, by target and by how "
    "they ended.",
    (TARGET, KIND, STATE),
)
JOB_RUNNING = MetricSpec(
    "fluidity_job_running",
    "gauge",
    "Jobs of this kind running against the target now (they send heavy load: expect its latency to rise).",
    (TARGET, KIND),
)

# --- The exporter's own health (direct instrumentation) ---------------------------------------------

BUILD_INFO = MetricSpec(
    "fluidity_exporter_build_info",
    "gauge",
    "Always 1; the labels say which exporter build runs.",
    (VERSION, PYTHON_VERSION),
)
JOB_RUNS = MetricSpec("fluidity_exporter_job_runs_total", "counter", "Scheduled job runs started.", (JOB_ID,))
JOB_ERRORS = MetricSpec(
    "fluidity_exporter_job_errors_total",
    "counter",
    "Scheduled job runs that raised (a bug of the exporter, logged with its traceback).",
    (JOB_ID,),
)
JOB_MISFIRES = MetricSpec(
    "fluidity_exporter_job_misfires_total",
    "counter",
    "Scheduled job runs that started later than their misfire grace time allows and were dropped.",
    (JOB_ID,),
)
JOB_SKIPPED = MetricSpec(
    "fluidity_exporter_job_skipped_total",
    "counter",
    "Scheduled job runs skipped: the previous run was still going (max_instances=1), or a probe run "
    "held back (a capacity search or prefill profile runs on its target, its budget is spent, it "
    "backs off after failed runs, or none of its requests can fit the context the target serves; the "
    "log says which).",
    (JOB_ID,),
)
EVENT_LOOP_LAG = MetricSpec(
    "fluidity_exporter_event_loop_lag_seconds",
    "histogram",
    "How late the exporter's event loop woke up for a timer sampled every 0.5 s, so it misses short "
    "stalls. While it is high, timings stamped on reading (TLS targets) are late; kernel-stamped ones "
    "(plain TCP on Linux) stay right but may read chunks of a stream together: each probe request "
    "judges that itself, and fluidity_probe_unreliable_requests_total counts those it flagged.",
)
ENGINE_SCRAPES = MetricSpec(
    "fluidity_exporter_engine_scrapes_total",
    "counter",
    "Scrapes of engines' /metrics attempted.",
    (TARGET,),
)
CALIBRATION_REQUESTS = MetricSpec(
    "fluidity_exporter_calibration_requests_total",
    "counter",
    "Prompt-calibration requests sent to a target that is not simulated (once per start or reload, "
    "and again after a failed fit), charged to its budget like a probe's requests.",
    (TARGET,),
)
CALIBRATION_SECONDS = MetricSpec(
    "fluidity_exporter_calibration_seconds_total",
    "counter",
    "Seconds spent calibrating a target's prompts: the first probe after a start or reload waits on "
    "it, for a bounded time.",
    (TARGET,),
)
ENGINE_SCRAPE_ERRORS = MetricSpec(
    "fluidity_exporter_engine_scrape_errors_total",
    "counter",
    "Scrapes of engines' /metrics that failed, by reason.",
    (TARGET, REASON),
)
CONFIG_RELOAD_SUCCESSFUL = MetricSpec(
    "fluidity_exporter_config_last_reload_successful",
    "gauge",
    "1 when the last configuration load or reload succeeded, else 0 (the previous one stays in force).",
)
CONFIG_RELOAD_TIMESTAMP = MetricSpec(
    "fluidity_exporter_config_last_reload_success_timestamp_seconds",
    "gauge",
    "Unix time of the last successful configuration load or reload.",
)
STATE_UNWRITTEN = MetricSpec(
    "fluidity_exporter_state_unwritten",
    "gauge",
    "1 while the latest write to this folder of global.state_dir failed (a read-only or full disk): its "
    "records are kept and used in memory only, and a restart loses them; 0 once a write succeeds. Only "
    "exported with a state_dir.",
    (STORE,),
)

PROBE_HISTOGRAMS: Final = (
    PROBE_TTFT,
    PROBE_TBT,
    PROBE_TPOT,
    PROBE_E2E,
    PROBE_NORMALIZED_LATENCY,
)
COLLECTED: Final = (
    *PROBE_HISTOGRAMS,
    PROBE_FLUIDITY,
    PROBE_REQUESTS,
    PROBE_RETRIES,
    PROBE_UNRELIABLE,
    PROBE_OUTPUT_TOKENS,
    PROBE_DEADLINES,
    PROBE_DEADLINES_MISSED,
    PROBE_GOOD_REQUESTS,
    PROBE_LAST_SUCCESS,
    PROBE_LAST_RUN_OK,
    PROBE_TURN_TTFT,
    PROBE_PROMPT_TOKENS,
    PROBE_PROMPT_CACHED_TOKENS,
    WINDOW_REQUESTS,
    WINDOW_FLUIDITY,
    WINDOW_SERVICE_LEVEL,
    WINDOW_FLUID_RATE,
    WINDOW_SLO_MET,
    WINDOW_GOODPUT,
    WINDOW_LATENESS,
    WINDOW_CLIENT_MINUS_SERVER_TTFT,
    WINDOW_CLIENT_MINUS_SERVER_MEAN_TTFT,
    ENGINE_SCRAPE_SUCCESS,
    ENGINE_SCRAPE_DURATION,
    ENGINE_INFO,
    ENGINE_QUEUE_DEPTH,
    ENGINE_RUNNING,
    ENGINE_KV_CACHE_USAGE,
    ENGINE_PREEMPTIONS,
    ENGINE_PROMPT_TOKENS,
    ENGINE_PREFIX_CACHE_QUERIES,
    ENGINE_PREFIX_CACHE_HITS,
    ENGINE_GENERATION_TOKENS,
    ENGINE_REQUEST_SUCCESS,
    ENGINE_WINDOW_TTFT,
    ENGINE_WINDOW_TTFT_BOUND,
    ENGINE_WINDOW_ITL,
    ENGINE_WINDOW_ITL_BOUND,
    ENGINE_WINDOW_E2E,
    ENGINE_WINDOW_E2E_BOUND,
    ENGINE_WINDOW_QUEUE,
    ENGINE_WINDOW_QUEUE_BOUND,
    ENGINE_WINDOW_TPOT,
    ENGINE_WINDOW_TPOT_BOUND,
    GATEWAY_SCRAPE_SUCCESS,
    GATEWAY_SCRAPE_DURATION,
    GATEWAY_INFO,
    GATEWAY_RUNNING,
    GATEWAY_REQUESTS,
    GATEWAY_REQUEST_ERRORS,
    GATEWAY_SLO_VIOLATIONS,
    GATEWAY_WINDOW_TTFT,
    GATEWAY_WINDOW_TTFT_BOUND,
    GATEWAY_WINDOW_ITL,
    GATEWAY_WINDOW_ITL_BOUND,
    GATEWAY_WINDOW_TPOT,
    GATEWAY_WINDOW_TPOT_BOUND,
    GATEWAY_WINDOW_E2E,
    GATEWAY_WINDOW_E2E_BOUND,
)
"""The families ``FluidityCollector`` builds on every scrape (``describe()`` yields them empty)."""

SELF: Final = (
    BUILD_INFO,
    JOB_RUNS,
    JOB_ERRORS,
    JOB_MISFIRES,
    JOB_SKIPPED,
    EVENT_LOOP_LAG,
    ENGINE_SCRAPES,
    ENGINE_SCRAPE_ERRORS,
    CALIBRATION_REQUESTS,
    CALIBRATION_SECONDS,
    CONFIG_RELOAD_SUCCESSFUL,
    CONFIG_RELOAD_TIMESTAMP,
)
"""The exporter's own health metrics (``SelfMetrics``)."""

PROBE_ONLY: Final = (PROBE_SUCCESS, PROBE_DURATION, PROBE_FAILURE)
"""Families only a ``/probe`` answer carries."""

JOB_RESULTS: Final = (
    CAPACITY_RATE,
    CAPACITY_CONCURRENCY,
    CAPACITY_FOUND,
    CAPACITY_UNRELIABLE_TIMINGS,
    CAPACITY_STATE,
    CAPACITY_STOPPED_BY,
    CAPACITY_LOWER_BOUND,
    CAPACITY_UPPER_BOUND,
    CAPACITY_PREDICTED_LOAD,
    CAPACITY_PREDICTION_ERROR,
    CAPACITY_FLUID_GOODPUT,
    CAPACITY_TOKENS_PER_GPU_SECOND,
    CAPACITY_TOKEN_COST,
    TARGET_GPUS,
    TARGET_SERVED_CONTEXT,
    PROBE_OVER_CONTEXT,
    CAPACITY_FLUID_RATE,
    CAPACITY_GOODPUT_RATIO,
    CAPACITY_GOODPUT_RATE,
    CAPACITY_TIMESTAMP,
    CAPACITY_TRIAL_LOAD,
    CAPACITY_TRIAL_PASSED,
    CAPACITY_TRIAL_HEADROOM,
    PREFILL_PROFILE_PREDICTED,
    PREFILL_PROFILE_TIMESTAMP,
    JOBS_FINISHED,
    JOB_RUNNING,
    STATE_UNWRITTEN,
)
"""The families ``JobsCollector`` builds from the job results on every scrape."""

# --- Real traffic, observed through Envoy (exporter.traffic): the probes' shapes, per (model, api) -----

TRAFFIC_SERIES: Final = (MODEL, API)
_TRAFFIC = "Of user requests observed through Envoy's ext_proc filter (probes' own are not among them)."
TRAFFIC_REQUESTS = MetricSpec(
    "fluidity_traffic_requests_total",
    "counter",
    f"Streaming requests observed, by how they ended (the probes' outcomes). {_TRAFFIC}",
    (*TRAFFIC_SERIES, OUTCOME),
)
TRAFFIC_TTFT = MetricSpec(
    "fluidity_traffic_ttft_seconds",
    "histogram",
    f"Time to first token of completed requests, from the end of the request body as Envoy passed it. {_TRAFFIC}",
    TRAFFIC_SERIES,
)
TRAFFIC_TBT = MetricSpec(
    "fluidity_traffic_tbt_seconds",
    "histogram",
    "Time between tokens: every gap after the first token of completed requests (tokens of one chunk "
    f"after the first count as 0 s gaps). {_TRAFFIC}",
    TRAFFIC_SERIES,
)
TRAFFIC_FLUIDITY = MetricSpec(
    "fluidity_traffic_fluidity_index",
    "histogram",
    f"Etalon fluidity-index per completed request, per decode tier of traffic.slo. {_TRAFFIC}",
    (*TRAFFIC_SERIES, TIER),
)
TRAFFIC_DEADLINES = MetricSpec(
    "fluidity_traffic_deadlines_total",
    "counter",
    "Token deadlines of completed requests per tier (a stall counts every deadline it spans); "
    f"1 - rate(missed) / rate(this) is the service-level fluidity users felt. {_TRAFFIC}",
    (*TRAFFIC_SERIES, TIER),
)
TRAFFIC_DEADLINES_MISSED = MetricSpec(
    "fluidity_traffic_deadlines_missed_total",
    "counter",
    f"Token deadlines missed by completed requests per tier. {_TRAFFIC}",
    (*TRAFFIC_SERIES, TIER),
)
TRAFFIC_SKIPPED = MetricSpec(
    "fluidity_traffic_streams_skipped_total",
    "counter",
    "Exchanges Envoy sent that gave no request record, by reason: not_llm (another route), not_streaming, "
    "too_large (past the bytes or events a stream may cost), incomplete, over_capacity (traffic.max_streams "
    "in flight), error (a bug of the exporter, logged).",
    (REASON,),
)
TRAFFIC_IN_FLIGHT = MetricSpec(
    "fluidity_traffic_streams_in_flight",
    "gauge",
    "Exchanges the observer is following now.",
)
TRAFFIC_TPOT = MetricSpec(
    "fluidity_traffic_tpot_seconds",
    "histogram",
    f"Time per output token, (E2E - TTFT) / (tokens - 1), of completed requests with 2+ tokens. {_TRAFFIC}",
    TRAFFIC_SERIES,
)
TRAFFIC_E2E = MetricSpec(
    "fluidity_traffic_e2e_seconds",
    "histogram",
    f"End-to-end latency of completed requests, end of the request body to end of stream. {_TRAFFIC}",
    TRAFFIC_SERIES,
)
TRAFFIC_NORMALIZED_LATENCY = MetricSpec(
    "fluidity_traffic_normalized_latency_seconds",
    "histogram",
    f"End-to-end latency divided by output tokens, per completed request. {_TRAFFIC}",
    TRAFFIC_SERIES,
)
TRAFFIC_GOOD_REQUESTS = MetricSpec(
    "fluidity_traffic_good_requests_total",
    "counter",
    "Requests that met every goodput bound of traffic.slo (without slos.<name>.goodput: a fluidity-index "
    "at the SLO's tier of at least its target_fluidity); failed requests never do. Divide by "
    f"fluidity_traffic_requests_total for the goodput ratio. {_TRAFFIC}",
    TRAFFIC_SERIES,
)
TRAFFIC_OUTPUT_TOKENS = MetricSpec(
    "fluidity_traffic_output_tokens_total",
    "counter",
    "Output tokens of completed requests, by where their count came from (the probes' token sources): "
    "token_ids or continuous_usage are exact; chunks (one per content event) and tokenizer are brought "
    f"to the stream's final usage.completion_tokens when it reports one. {_TRAFFIC}",
    (*TRAFFIC_SERIES, TOKEN_SOURCE),
)
TRAFFIC_GOOD_OUTPUT_TOKENS = MetricSpec(
    "fluidity_traffic_good_output_tokens_total",
    "counter",
    "Output tokens of the requests counted in fluidity_traffic_good_requests_total: rate() of it is the "
    f"goodput in tokens per second. {_TRAFFIC}",
    TRAFFIC_SERIES,
)
TRAFFIC_PROMPT_TOKENS = MetricSpec(
    "fluidity_traffic_prompt_tokens_total",
    "counter",
    'Prompt tokens of observed requests (what sets a prefill deadline): source="usage" as the stream\'s '
    'usage.prompt_tokens reported them, source="estimated" from the request body\'s length in bytes '
    "times the tokens per byte of the (model, api)'s requests that did report usage (0.25 before any did). "
    f"{_TRAFFIC}",
    (*TRAFFIC_SERIES, SOURCE),
)
TRAFFIC_UNRELIABLE = MetricSpec(
    "fluidity_traffic_unreliable_requests_total",
    "counter",
    "Requests whose timings the observer flagged unreliable by the probe client's own rule: its event "
    "loop was late while the stream was open, or Envoy passed chunks holding several token events that "
    "may have come more than 3 ms apart (a buffering filter); they are in every other traffic metric all "
    f"the same. {_TRAFFIC}",
    TRAFFIC_SERIES,
)
_TRAFFIC_WINDOW = (
    "Computed at scrape time over the observed requests of the rolling window (at most "
    "exposition.traffic_stats.WINDOW_ROWS of the newest per series); do not sum across sidecars."
)
TRAFFIC_WINDOW_REQUESTS = MetricSpec(
    "fluidity_traffic_window_requests",
    "gauge",
    f"Observed requests in the rolling window by outcome. {_TRAFFIC_WINDOW}",
    (*TRAFFIC_SERIES, WINDOW, OUTCOME),
)
TRAFFIC_WINDOW_FLUIDITY = MetricSpec(
    "fluidity_traffic_window_fluidity_index",
    "gauge",
    "Percentiles of the fluidity-index of the window's completed requests, as "
    f'fluidity_window_fluidity_index (percentile="1": the value 99% of them reach). {_TRAFFIC_WINDOW}',
    (*TRAFFIC_SERIES, WINDOW, TIER, PERCENTILE),
)
TRAFFIC_WINDOW_SERVICE_LEVEL = MetricSpec(
    "fluidity_traffic_window_service_level_ratio",
    "gauge",
    "Token-weighted fluidity of the window's completed requests: 1 - missed deadlines / deadlines, per "
    f"tier; none completed: absent. {_TRAFFIC_WINDOW}",
    (*TRAFFIC_SERIES, WINDOW, TIER),
)
TRAFFIC_WINDOW_SLO_MET = MetricSpec(
    "fluidity_traffic_window_slo_met",
    "gauge",
    "1 when each objective of traffic.slo holds over the window's observed requests, 0 when not; a "
    f"failed request counts at the worst value of every metric; absent without a request. {_TRAFFIC_WINDOW}",
    (*TRAFFIC_SERIES, WINDOW, SLO),
)
TRAFFIC_WINDOW_GOODPUT = MetricSpec(
    "fluidity_traffic_window_goodput_ratio",
    "gauge",
    "Share of the window's observed requests (failed ones included) that were good (as "
    f"fluidity_traffic_good_requests_total). {_TRAFFIC_WINDOW}",
    (*TRAFFIC_SERIES, WINDOW),
)
TRAFFIC_ENVOY_STREAMS = MetricSpec(
    "fluidity_traffic_envoy_streams_total",
    "counter",
    "ext_proc streams Envoy opened to the observer (one per HTTP exchange), by how each ended: observed "
    "(a user request recorded), unreliable (recorded, its timings flagged), probe (the exporter's own, "
    "compared with its client), not_llm, not_streaming, dropped (no record: "
    "fluidity_traffic_streams_skipped_total says why).",
    (STATE,),
)
TRAFFIC_ENVOY_CONNECTIONS = MetricSpec(
    "fluidity_traffic_envoy_connections",
    "gauge",
    "Envoy connections (distinct peer addresses) with at least one ext_proc stream open now: 0 while "
    "no request passes, or while Envoy cannot reach the observer.",
)
TRAFFIC_LAST_MESSAGE = MetricSpec(
    "fluidity_traffic_last_message_timestamp_seconds",
    "gauge",
    "Unix time of the latest message Envoy sent the observer; absent before the first. time() minus it "
    "growing while users send requests means Envoy does not reach the observer.",
)
_AGREEMENT = (
    "Of the exporter's own probe requests that the observer saw too, joined on the request id the "
    "client sends in X-Fluidity-Probe: a continuous check of the observer's accuracy."
)
TRAFFIC_PROBE_COMPARED = MetricSpec(
    "fluidity_traffic_probe_requests_compared_total",
    "counter",
    f"Probe requests seen both by their client and by the observer. {_AGREEMENT}",
)
TRAFFIC_PROBE_GAP_DIFFERENCE = MetricSpec(
    "fluidity_traffic_probe_gap_difference_seconds",
    "histogram",
    "|observer gap - client gap| for every gap between two token events of a compared probe request "
    f"(requests whose two views hold the same number of token events). {_AGREEMENT}",
)
TRAFFIC_PROBE_VERDICT_DIFFERENCES = MetricSpec(
    "fluidity_traffic_probe_verdict_differences_total",
    "counter",
    "Compared probe requests judged fluid (completed, fluidity-index at traffic.slo's tier of at least "
    f"its target_fluidity) by one view and not by the other. {_AGREEMENT}",
)
TRAFFIC_PROBE_UNMATCHED = MetricSpec(
    "fluidity_traffic_probe_unmatched_total",
    "counter",
    'Probe requests only one side saw within exposition.traffic_agreement.JOIN_WAIT_S: side="observer" '
    '(another exporter\'s probe through this Envoy, or a client result lost), side="client" (a probe of '
    "a target not behind this Envoy, or a stream the observer dropped).",
    (SIDE,),
)
TRAFFIC: Final = (
    TRAFFIC_REQUESTS,
    TRAFFIC_TTFT,
    TRAFFIC_TBT,
    TRAFFIC_TPOT,
    TRAFFIC_E2E,
    TRAFFIC_NORMALIZED_LATENCY,
    TRAFFIC_FLUIDITY,
    TRAFFIC_DEADLINES,
    TRAFFIC_DEADLINES_MISSED,
    TRAFFIC_GOOD_REQUESTS,
    TRAFFIC_OUTPUT_TOKENS,
    TRAFFIC_GOOD_OUTPUT_TOKENS,
    TRAFFIC_PROMPT_TOKENS,
    TRAFFIC_UNRELIABLE,
    TRAFFIC_WINDOW_REQUESTS,
    TRAFFIC_WINDOW_FLUIDITY,
    TRAFFIC_WINDOW_SERVICE_LEVEL,
    TRAFFIC_WINDOW_SLO_MET,
    TRAFFIC_WINDOW_GOODPUT,
    TRAFFIC_SKIPPED,
    TRAFFIC_IN_FLIGHT,
    TRAFFIC_ENVOY_STREAMS,
    TRAFFIC_ENVOY_CONNECTIONS,
    TRAFFIC_LAST_MESSAGE,
    TRAFFIC_PROBE_COMPARED,
    TRAFFIC_PROBE_GAP_DIFFERENCE,
    TRAFFIC_PROBE_VERDICT_DIFFERENCES,
    TRAFFIC_PROBE_UNMATCHED,
)
"""The families of the traffic observer (``exposition.traffic_stats``), when ``traffic:`` is configured."""

ALL: Final = (*COLLECTED, *JOB_RESULTS, *SELF, *PROBE_ONLY, *TRAFFIC)
