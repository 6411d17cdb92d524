"""Engine: the engine's own signals (re-exported as ``fluidity_engine_*``) on the same time axis as the
fluidity users feel, so that a dip in fluidity can be read against queueing, batch size, KV-cache
pressure, preemptions and prefill load at that moment; and, for a target behind a gateway (llm-d's
endpoint picker, ``fluidity_gateway_*``), the gateway's view of TTFT and TPOT between the probes' and the
engine's, so the time each hop adds can be read off one panel.

Engine and gateway families carry only a ``target`` label (one engine and one gateway per target); the
fluidity panels are also narrowed by ``module``.
"""

from __future__ import annotations

from typing import Any

from dashboards.common import (
    COUNT,
    ENGINE,
    ENGINE_WINDOWED,
    RATIO,
    REQUESTS_PER_SECOND,
    SECONDS,
    SERIES,
    STATE,
    TOKENS_PER_SECOND,
    WINDOWED,
    Cell,
    Query,
    Section,
    new_dashboard,
    quantile,
    rate,
    service_level,
    stat,
    steps,
    timeseries,
    value_text,
    variables,
)
from exporter.exposition import names
from exporter.exposition.names import MetricSpec

PERCENTILE_LEGEND = "{{target}} p{{percentile}}"
BOUND_LEGEND = "{{target}} p{{percentile}} {{bound}} bound"
FLUIDITY_STEPS = steps("red", (0.95, "orange"), (0.99, "green"))
# A percentile that falls in a bucket starting at 0 or in the +Inf bucket is exported only as a bound
# (``..._bound_seconds``). Drawn dashed, and its legend ends "upper bound" or "lower bound", so that it is
# not read as a measured line.
BOUND_DASHED: dict[str, Any] = {
    "matcher": {"id": "byRegexp", "options": ".* (upper|lower) bound$"},
    "properties": [{"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [10, 10]}}],
}
BOUND_NOTE = (
    " Dashed: where a percentile falls in a bucket starting at 0 (the histogram's first) or in its +Inf "
    "bucket, the buckets give only a bound, drawn instead: upper bound (the percentile is at most this) or "
    "lower bound (above this); not a measurement."
)


def gauge(spec: MetricSpec) -> str:
    return f"{spec.name}{ENGINE}"


def server_percentiles(title: str, specs: tuple[MetricSpec, MetricSpec], description: str) -> Cell:
    """A window percentile family beside its bound family (what the buckets cannot resolve), dashed."""
    value, bound = specs
    queries = [
        Query(f"{value.name}{ENGINE_WINDOWED}", PERCENTILE_LEGEND),
        Query(f"{bound.name}{ENGINE_WINDOWED}", BOUND_LEGEND),
    ]
    panel = timeseries(title, description + BOUND_NOTE, SECONDS, queries, overrides=[BOUND_DASHED])
    return Cell(panel, 6)


def window_percentile(spec: MetricSpec, percentile: str) -> str:
    """One percentile of a window gauge of the engine or the gateway."""
    return f'{spec.name}{{target=~"$target",window="$window",percentile="{percentile}"}}'


scrape_up = stat(
    "Engine /metrics scrape",
    "Whether the latest scrape of the engine's own /metrics succeeded. While it is down every other "
    "engine panel is empty (the fluidity_engine_ series are absent). Good: up.",
    STATE,
    [Query(gauge(names.ENGINE_SCRAPE_SUCCESS), "{{target}}")],
    thresholds=steps("red", (1, "green")),
    mappings=value_text({1: ("up", "green"), 0: ("down", "red")}),
    sparkline=False,
)
engine_kind = stat(
    "Engine recognised",
    "Whose metric names the exporter recognised in the engine's /metrics (engine_metrics.kind, or "
    "detected when it is auto): vllm, sglang, tgi or llamacpp. Which panels below can fill depends on "
    "it (llama.cpp has no histograms, TGI no KV-cache gauge). Good: the engine you deployed; empty "
    "while scrapes fail.",
    "none",
    [Query(gauge(names.ENGINE_INFO), "{{target}}: {{engine}}")],
    sparkline=False,
)
queue_depth = timeseries(
    "Queue depth (waiting requests)",
    "Requests waiting to be scheduled by the engine (vLLM num_requests_waiting). Good: 0 most of the "
    "time; a queue that keeps growing means the engine is past its capacity and TTFT will climb.",
    COUNT,
    [Query(gauge(names.ENGINE_QUEUE_DEPTH), "{{target}}")],
)
running = timeseries(
    "Running requests",
    "Requests in the engine's running batch. A larger batch raises throughput but slows every token: "
    "read it with TBT and fluidity. Good: below the engine's max_num_seqs, steady.",
    COUNT,
    [Query(gauge(names.ENGINE_RUNNING), "{{target}}")],
)
kv_cache = timeseries(
    "KV-cache usage",
    "Share of the engine's KV-cache blocks in use, 0-1. Near 1 the engine preempts running requests "
    "(their tokens stall while they are recomputed). Good: below about 90%.",
    RATIO,
    [Query(gauge(names.ENGINE_KV_CACHE_USAGE), "{{target}}")],
    low=0,
    high=1,
    thresholds=steps("green", (0.9, "red")),
)
preemptions = timeseries(
    "Preemptions",
    "Requests the engine preempted per second (SGLang: retractions): each one stalls a request's output "
    "until it is rescheduled, which fluidity counts as missed deadlines. Good: 0.",
    "suffix: preemptions/s",
    [Query(rate(names.ENGINE_PREEMPTIONS, ENGINE), "{{target}}")],
)
token_throughput = timeseries(
    "Prompt and generation throughput",
    "Prompt tokens prefilled and output tokens generated per second by the engine, every client "
    "included. Prefill bursts (long prompts) are what stall the decoding of other requests. Good: "
    "generation throughput rising with load while fluidity holds.",
    TOKENS_PER_SECOND,
    [
        Query(rate(names.ENGINE_PROMPT_TOKENS, ENGINE), "{{target}} prompt"),
        Query(rate(names.ENGINE_GENERATION_TOKENS, ENGINE), "{{target}} generation"),
    ],
)
finished = timeseries(
    "Requests finished by the engine",
    "Requests the engine completed per second, every client included (the probes are a small part). "
    "Good: follows the offered load; a flat line under a growing queue means saturation.",
    REQUESTS_PER_SECOND,
    [Query(rate(names.ENGINE_REQUEST_SUCCESS, ENGINE), "{{target}}")],
)

client_vs_server = timeseries(
    "Client vs server TTFT (p50)",
    "Median time to first token as the probes see it (client, from the TTFT histogram over the rate "
    "interval) and as the engine reports it (server, over the selected window). Good: the two close "
    "together; the gap is network, gateways and queues in front of the engine." + BOUND_NOTE,
    SECONDS,
    [
        Query(quantile(0.5, names.PROBE_TTFT, ["target"]), "{{target}} client"),
        Query(window_percentile(names.ENGINE_WINDOW_TTFT, "50"), "{{target}} server"),
        Query(window_percentile(names.ENGINE_WINDOW_TTFT_BOUND, "50"), "{{target}} server {{bound}} bound"),
    ],
    overrides=[BOUND_DASHED],
)
client_minus_server = timeseries(
    "Client minus server TTFT",
    "Probe TTFT minus the engine's own TTFT over the window, per module: the percentile difference and "
    "the difference of means. Positive: time spent outside the engine (network, TLS, gateways, "
    "load balancer queues). Bucket-resolution limited, so it can dip below 0; the percentile difference "
    "is absent where the engine's percentile is only a bound (in a bucket starting at 0 or in +Inf), the "
    "difference of means is exact. Good: a few milliseconds.",
    SECONDS,
    [
        Query(
            f"{names.WINDOW_CLIENT_MINUS_SERVER_TTFT.name}{WINDOWED}",
            "{{target}}/{{module}} p{{percentile}}",
        ),
        Query(f"{names.WINDOW_CLIENT_MINUS_SERVER_MEAN_TTFT.name}{WINDOWED}", "{{target}}/{{module}} mean"),
    ],
)

fluidity = timeseries(
    "Service-level fluidity per decode tier",
    "Share of token deadlines the probes met, per tier (as on the overview), on the same time axis as "
    "the engine panels: hover to line a dip up with the queue, batch size, KV-cache and prefill load. "
    "Good: flat near 1.",
    RATIO,
    [Query(service_level([*SERIES, "tier"]), "{{target}}/{{module}} {{tier}}")],
    high=1,
    thresholds=FLUIDITY_STEPS,
)
fluid_rate = timeseries(
    "Fluid token generation rate",
    "The highest playback rate at which the configured percentile of the window's requests stay fluid. "
    "Good: steady and above reading speed; it falls when the batch grows or prefills interrupt decoding.",
    TOKENS_PER_SECOND,
    [Query(f"{names.WINDOW_FLUID_RATE.name}{WINDOWED}", "{{target}}/{{module}}")],
)
tbt_p99 = timeseries(
    "Client TBT p99 vs server ITL p99",
    "The 99th percentile gap between tokens as the probes receive them (client TBT) and as the engine "
    "emits them (server inter-token latency, over the window). Good: both below the decode deadline; "
    "client far above server means the stream is delayed between engine and client." + BOUND_NOTE,
    SECONDS,
    [
        Query(quantile(0.99, names.PROBE_TBT, ["target"]), "{{target}} client TBT p99"),
        Query(window_percentile(names.ENGINE_WINDOW_ITL, "99"), "{{target}} server ITL p99"),
        Query(
            window_percentile(names.ENGINE_WINDOW_ITL_BOUND, "99"),
            "{{target}} server ITL p99 {{bound}} bound",
        ),
    ],
    overrides=[BOUND_DASHED],
)


def hop_medians(value: MetricSpec, bound: MetricSpec, hop: str) -> list[Query]:
    """The median at one hop (gateway or engine), and its bound where the buckets give only that."""
    return [
        Query(window_percentile(value, "50"), f"{{{{target}}}} {hop}"),
        Query(window_percentile(bound, "50"), f"{{{{target}}}} {hop} {{{{bound}}}} bound"),
    ]


three_ttft = timeseries(
    "TTFT p50: probes, gateway, engine",
    "Median time to first token at each hop: as the probes receive it (client), as the gateway sees "
    "it (request received to first response byte, streaming requests) and as the engine stamps it. "
    "Each gap is time spent in between: probes minus gateway is the network to the gateway, gateway "
    "minus engine the routing and the hop to the pod. Good: the three close together." + BOUND_NOTE,
    SECONDS,
    [
        Query(quantile(0.5, names.PROBE_TTFT, ["target"]), "{{target}} probes"),
        *hop_medians(names.GATEWAY_WINDOW_TTFT, names.GATEWAY_WINDOW_TTFT_BOUND, "gateway"),
        *hop_medians(names.ENGINE_WINDOW_TTFT, names.ENGINE_WINDOW_TTFT_BOUND, "engine"),
    ],
    overrides=[BOUND_DASHED],
)
three_tpot = timeseries(
    "TPOT p50: probes, gateway, engine",
    "Median time per output token, (E2E - TTFT) / (tokens - 1) per request, at each hop (OpenTelemetry's "
    "gen_ai.server.time_per_output_token on the engine and the gateway). The probes are a small part of "
    "the gateway's and the engine's traffic, so the three agree only when the probes are typical. Good: "
    "the three close together and below the decode deadline." + BOUND_NOTE,
    SECONDS,
    [
        Query(quantile(0.5, names.PROBE_TPOT, ["target"]), "{{target}} probes"),
        *hop_medians(names.GATEWAY_WINDOW_TPOT, names.GATEWAY_WINDOW_TPOT_BOUND, "gateway"),
        *hop_medians(names.ENGINE_WINDOW_TPOT, names.ENGINE_WINDOW_TPOT_BOUND, "engine"),
    ],
    overrides=[BOUND_DASHED],
)
gateway_traffic = timeseries(
    "Gateway requests, errors and SLO violations",
    "Requests the gateway routed, answered with an error, and flagged as breaking its own latency SLO "
    "(TTFT or TPOT, llm-d's predicted-latency plugin), per second, every client included. Good: errors "
    "and violations at 0.",
    REQUESTS_PER_SECOND,
    [
        Query(rate(names.GATEWAY_REQUESTS, ENGINE), "{{target}} requests"),
        Query(rate(names.GATEWAY_REQUEST_ERRORS, ENGINE), "{{target}} errors"),
        Query(rate(names.GATEWAY_SLO_VIOLATIONS, ENGINE), "{{target}} SLO violations"),
    ],
)
gateway_running = timeseries(
    "Gateway requests in flight",
    "Requests the gateway has in flight for the model, across every pod behind it. Good: steady; read "
    "it with the engine's running requests to see how the load is spread.",
    COUNT,
    [Query(gauge(names.GATEWAY_RUNNING), "{{target}}")],
)
gateway_up = stat(
    "Gateway /metrics scrape",
    "Whether the latest scrape of the gateway's /metrics succeeded (targets with gateway_metrics). Good: "
    "up; empty for a target without a gateway.",
    STATE,
    [Query(gauge(names.GATEWAY_SCRAPE_SUCCESS), "{{target}}")],
    thresholds=steps("red", (1, "green")),
    mappings=value_text({1: ("up", "green"), 0: ("down", "red")}),
    sparkline=False,
)
gateway_kind = stat(
    "Gateway recognised",
    "Whose metric names the exporter recognised in the gateway's /metrics (gateway_metrics.kind, or "
    "detected when it is auto): llm-d-epp. Good: the gateway you deployed.",
    "none",
    [Query(gauge(names.GATEWAY_INFO), "{{target}}: {{gateway}}")],
    sparkline=False,
)
gateway_scrape_duration = timeseries(
    "Gateway scrape duration",
    "How long the latest scrape of the gateway's /metrics took. Good: well under the scrape interval.",
    SECONDS,
    [Query(gauge(names.GATEWAY_SCRAPE_DURATION), "{{target}}")],
)

jobs_running = timeseries(
    "Capacity and profiling jobs running",
    "Jobs sending load to the target now (a capacity search drives it to saturation on purpose). Good: "
    "0 outside planned runs; a 1 explains a saturated engine.",
    COUNT,
    [Query(f"{names.JOB_RUNNING.name}{ENGINE}", "{{target}} {{kind}}")],
    step=True,
)
served_context = stat(
    "Served context (tokens)",
    "The context length the target says it serves (max_model_len of its GET /v1/models), asked before its "
    "first probe, after each reload, before each probe while it does not answer, and again at most every "
    "10 minutes while it does not say, after an HTTP 400, or while a module cannot fit it. Probes keep "
    "each request's prompt + output within it, so a module longer than it is cut to fit (the log says how "
    "much) or, if none of it fits, skipped (fluidity_probe_over_context). Good: the context you deployed; empty when the server "
    "does not say (llama.cpp), and then probes are sent as configured.",
    COUNT,
    [Query(f"{names.TARGET_SERVED_CONTEXT.name}{ENGINE}", "{{target}}")],
    sparkline=False,
)
scrape_duration = timeseries(
    "Engine scrape duration",
    "How long the latest scrape of the engine's /metrics took. Good: well under the scrape interval; a "
    "slow /metrics often means an overloaded engine process.",
    SECONDS,
    [Query(gauge(names.ENGINE_SCRAPE_DURATION), "{{target}}")],
)
scrape_errors = timeseries(
    "Engine scrape errors",
    "Failed scrapes of the engine's /metrics per second, by reason. Good: 0.",
    "suffix: scrapes/s",
    [
        Query(
            f"sum by (target, reason) ({rate(names.ENGINE_SCRAPE_ERRORS, ENGINE)})",
            "{{target}} {{reason}}",
        )
    ],
)

dashboard = new_dashboard(
    "Fluidity / Engine",
    "fluidity-engine",
    "The inference engine's own metrics (queue, batch, KV-cache, throughput, server-side latency) "
    "correlated with the fluidity users feel (Fluidity Exporter).",
    variables(window=True),
    [
        Section(
            "Fluidity (same time axis)",
            [Cell(fluidity, 12), Cell(fluid_rate, 12)],
        ),
        Section(
            "Engine state",
            [
                Cell(queue_depth, 8),
                Cell(running, 8),
                Cell(kv_cache, 8),
                Cell(preemptions, 8),
                Cell(token_throughput, 8),
                Cell(finished, 8),
            ],
        ),
        Section(
            "Server vs client latency",
            [
                Cell(client_vs_server, 8),
                Cell(client_minus_server, 8),
                Cell(tbt_p99, 8),
                server_percentiles(
                    "Server TTFT percentiles",
                    (names.ENGINE_WINDOW_TTFT, names.ENGINE_WINDOW_TTFT_BOUND),
                    "Time to first token as the engine measures it (queue + prefill), p50/p90/p99 over the "
                    "window, from its histogram. Good: below your prefill deadline.",
                ),
                server_percentiles(
                    "Server inter-token latency percentiles",
                    (names.ENGINE_WINDOW_ITL, names.ENGINE_WINDOW_ITL_BOUND),
                    "Gap between tokens as the engine emits them, p50/p90/p99 over the window. Good: p99 "
                    "below the decode deadline; a high p99 with a low p50 means stalls.",
                ),
                server_percentiles(
                    "Server queue time percentiles",
                    (names.ENGINE_WINDOW_QUEUE, names.ENGINE_WINDOW_QUEUE_BOUND),
                    "Time requests waited in the engine's queue before being scheduled, p50/p90/p99 over "
                    "the window. Good: near 0; it grows first when the engine saturates.",
                ),
                server_percentiles(
                    "Server E2E latency percentiles",
                    (names.ENGINE_WINDOW_E2E, names.ENGINE_WINDOW_E2E_BOUND),
                    "End-to-end request latency as the engine measures it, p50/p90/p99 over the window. "
                    "Good: stable for a steady workload; compare with the probes' E2E on the overview.",
                ),
                server_percentiles(
                    "Server TPOT percentiles",
                    (names.ENGINE_WINDOW_TPOT, names.ENGINE_WINDOW_TPOT_BOUND),
                    "Time per output token as the engine measures it, one value per request ((E2E - TTFT) "
                    "/ (tokens - 1)), p50/p90/p99 over the window. Good: below the decode deadline.",
                ),
            ],
        ),
        Section(
            "Gateway beside the probes and the engine",
            [
                Cell(three_ttft, 12),
                Cell(three_tpot, 12),
                server_percentiles(
                    "Gateway inter-token latency percentiles",
                    (names.GATEWAY_WINDOW_ITL, names.GATEWAY_WINDOW_ITL_BOUND),
                    "Time between response body chunks as the gateway forwards them, p50/p90/p99 over the "
                    "window. Good: p99 below the decode deadline, close to the engine's.",
                ),
                server_percentiles(
                    "Gateway E2E latency percentiles",
                    (names.GATEWAY_WINDOW_E2E, names.GATEWAY_WINDOW_E2E_BOUND),
                    "End-to-end request latency at the gateway, p50/p90/p99 over the window. Good: the "
                    "engine's plus a few milliseconds.",
                ),
                Cell(gateway_traffic, 6),
                Cell(gateway_running, 6),
                Cell(gateway_up, 3, 6),
                Cell(gateway_kind, 3, 6),
                Cell(gateway_scrape_duration, 6, 6),
            ],
        ),
        Section(
            "Jobs and scraping",
            [
                Cell(jobs_running, 6, 6),
                Cell(scrape_up, 3, 6),
                Cell(engine_kind, 3, 6),
                Cell(scrape_duration, 6, 6),
                Cell(scrape_errors, 6, 6),
                Cell(served_context, 6, 6),
            ],
        ),
    ],
)
