"""Traffic: real user traffic, observed through Envoy's ext_proc filter (``fluidity_traffic_*``).
"Users vs probes" sets what users felt beside what the probes felt, with the same definitions, and
"Traffic observer" shows whether the observer sees the traffic at all. A dashboard of its own, beside
the Overview: each dashboard is one ConfigMap, which a client-side apply keeps under 256 KiB.

Real traffic has no target or module: its series are per ``model`` (``traffic.models``, else "other")
and ``api``. Its panels keep the scrape's identity labels, as every other panel does, and follow the
decode-tier and window variables; the probes' side follows its target and module variables.
"""

from __future__ import annotations

from typing import Final

from dashboards.common import (
    COUNT,
    FACTOR,
    IDENTITY,
    PROBE,
    RATIO,
    REQUESTS_PER_SECOND,
    SECONDS,
    SERIES,
    TIERED,
    Cell,
    Query,
    Section,
    new_dashboard,
    quantile,
    service_level,
    stat,
    steps,
    sum_rate,
    timeseries,
    unit_override,
    variables,
)
from exporter.exposition import names

ALL: Final = ""  # traffic families carry no target or module to narrow by
TRAFFIC_TIERED: Final = '{tier="$tier"}'
USERS: Final = (*IDENTITY, "model")
USERS_LEGEND: Final = "users {{model}}"
PROBES_LEGEND: Final = "probes {{target}}/{{module}}"


def users_service_level() -> str:
    """``1 - missed / deadlines`` of user requests at the dashboard's tier, per model."""
    missed = sum_rate(names.TRAFFIC_DEADLINES_MISSED, USERS, TRAFFIC_TIERED)
    total = sum_rate(names.TRAFFIC_DEADLINES, USERS, TRAFFIC_TIERED)
    return f"1 - {missed} / {total}"


def side_by_side(title: str, users: str, probes: str, spec: str, unit: str, good: str) -> Cell:
    """Users' and probes' p50 and p99 of a latency, one panel."""
    user_spec, probe_spec = getattr(names, f"TRAFFIC_{spec}"), getattr(names, f"PROBE_{spec}")
    queries = [
        *(Query(quantile(q, user_spec, USERS, ALL), f"{USERS_LEGEND} p{q * 100:g}") for q in (0.5, 0.99)),
        *(
            Query(quantile(q, probe_spec, SERIES, PROBE), f"{PROBES_LEGEND} p{q * 100:g}")
            for q in (0.5, 0.99)
        ),
    ]
    return Cell(timeseries(title, f"{users} {probes} {good}", unit, queries, low=0), 12)


fluidity_level = timeseries(
    "Service-level fluidity: users vs probes",
    "1 - missed token deadlines / token deadlines at the selected decode tier, of user requests "
    "observed through Envoy (per model) and of the exporter's probes (per target/module), from the same "
    "definitions. The probes send a steady, known workload; users bring the real load and prompt mix: "
    "users under the probes means the traffic that hurts is one no probe module resembles. Good: both "
    "at or above the objective (0.99).",
    RATIO,
    [
        Query(users_service_level(), USERS_LEGEND),
        Query(service_level(SERIES, TIERED), PROBES_LEGEND),
    ],
    high=1,
    thresholds=steps("red", (0.95, "orange"), (0.99, "green")),
)
fluid_share = timeseries(
    "Fluid requests: users vs probes",
    "Share of requests whose fluidity-index reached the target (0.9) at the selected tier, failed "
    "requests counted as not fluid, over 5 minutes (the recording rules' ratios). Good: close to 1.",
    RATIO,
    [
        Query('model_tier:fluidity_traffic_fluid_requests:ratio_rate5m{tier="$tier"}', USERS_LEGEND),
        Query(
            'target_module_tier:fluidity_fluid_requests:ratio_rate5m{target=~"$target",module=~"$module",'
            'tier="$tier"}',
            PROBES_LEGEND,
        ),
    ],
    low=0,
    high=1,
)
users_burn = stat(
    "Users' error-budget burn rate (1h)",
    "Missed user token deadlines over the last hour, over the share the objective allows (1 spends the "
    "30-day budget exactly), per model and tier with an objective. FluidityTrafficErrorBudgetFastBurn "
    "pages above 14.4 (with the 5m window too, and 10 completed requests in the hour). Good: under 1.",
    FACTOR,
    [Query("model_tier:fluidity_traffic_slo_burn_rate:ratio_rate1h", "{{model}} {{tier}}")],
    thresholds=steps("green", (1.0, "orange"), (14.4, "red")),
    decimals=1,
)
users_fluidity = timeseries(
    "Fluidity-index percentiles: users vs probes",
    "Per-request fluidity-index (1 = every deadline met) at the selected tier, from the histograms: p1 is "
    "the fluidity 99% of requests reach or exceed. Users per model, probes per target/module. Good: p1 "
    "at or above the target fluidity (0.9); a low users' p1 beside a high probes' p1 means some real "
    "requests stall that no probe resembles.",
    RATIO,
    [
        *(
            Query(quantile(q, names.TRAFFIC_FLUIDITY, USERS, TRAFFIC_TIERED), f"{USERS_LEGEND} p{q * 100:g}")
            for q in (0.01, 0.5)
        ),
        *(
            Query(quantile(q, names.PROBE_FLUIDITY, SERIES, TIERED), f"{PROBES_LEGEND} p{q * 100:g}")
            for q in (0.01, 0.5)
        ),
    ],
    high=1,
)
volume = timeseries(
    "Requests: users vs probes",
    "User requests per second observed through Envoy, by how they ended, beside the probes' requests "
    "per second. Real traffic is usually tens to thousands of times the probes': a burn-rate window "
    "judges that many more requests. Good: user failures (any outcome but ok) near 0.",
    REQUESTS_PER_SECOND,
    [
        Query(sum_rate(names.TRAFFIC_REQUESTS, (*USERS, "outcome"), ALL), "users {{model}} {{outcome}}"),
        Query(sum_rate(names.PROBE_REQUESTS, SERIES), PROBES_LEGEND),
    ],
    low=0,
)

goodput = timeseries(
    "Goodput ratio: users vs probes",
    "Share of requests, failed ones included, that met every goodput bound of the SLO (without goodput "
    "bounds: a fluidity-index at the SLO's tier of at least its target), users per model beside probes "
    "per target/module. Good: close to 1; it falls both when requests fail and when they are slow.",
    RATIO,
    [
        Query(
            f"{sum_rate(names.TRAFFIC_GOOD_REQUESTS, USERS, ALL)} / {sum_rate(names.TRAFFIC_REQUESTS, USERS, ALL)}",
            USERS_LEGEND,
        ),
        Query(
            f"{sum_rate(names.PROBE_GOOD_REQUESTS, SERIES)} / {sum_rate(names.PROBE_REQUESTS, SERIES)}",
            PROBES_LEGEND,
        ),
    ],
    low=0,
    high=1,
)
tokens = timeseries(
    "Users' tokens per second",
    "Output tokens per second of completed user requests by where their count came from (token_ids and "
    "continuous_usage are exact; chunks and tokenizer are brought to the stream's usage when it reports "
    "one), the good ones' (goodput in tokens/s), and prompt tokens by source (usage as reported, or "
    "estimated from the request body). Good: good output tokens close to all output tokens.",
    "suffix: tok/s",
    [
        Query(
            sum_rate(names.TRAFFIC_OUTPUT_TOKENS, (*USERS, "token_source"), ALL),
            "output {{model}} {{token_source}}",
        ),
        Query(sum_rate(names.TRAFFIC_GOOD_OUTPUT_TOKENS, USERS, ALL), "good output {{model}}"),
        Query(sum_rate(names.TRAFFIC_PROMPT_TOKENS, (*USERS, "source"), ALL), "prompt {{model}} {{source}}"),
    ],
    low=0,
)
USERS_WINDOWED: Final = '{window="$window"}'
window_users = timeseries(
    "Users over the window (exact)",
    "Computed by the exporter at scrape time over the rolling window's observed requests: the "
    "service level at the selected tier, the fluidity-index p1 (99% of requests reach it), the goodput "
    "ratio and whether each objective of traffic.slo holds (1) or not (0). Per exporter: not summed "
    "across sidecars. Good: all at or near 1.",
    RATIO,
    [
        Query(
            f'{names.TRAFFIC_WINDOW_SERVICE_LEVEL.name}{{window="$window",tier="$tier"}}',
            "level {{model}} {{api}}",
        ),
        Query(
            f'{names.TRAFFIC_WINDOW_FLUIDITY.name}{{window="$window",tier="$tier",percentile="1"}}',
            "fluidity p1 {{model}} {{api}}",
        ),
        Query(f"{names.TRAFFIC_WINDOW_GOODPUT.name}{USERS_WINDOWED}", "goodput {{model}} {{api}}"),
        Query(f"{names.TRAFFIC_WINDOW_SLO_MET.name}{USERS_WINDOWED}", "SLO {{slo}} met {{model}} {{api}}"),
    ],
    low=0,
    high=1,
)
window_volume = timeseries(
    "Users' requests in the window",
    "Observed user requests in the rolling window, by how they ended, per exporter (the window's figures "
    "rest on these). Good: enough ok requests for the window's percentiles to mean something.",
    COUNT,
    [Query(f"{names.TRAFFIC_WINDOW_REQUESTS.name}{USERS_WINDOWED} > 0", "{{model}} {{api}} {{outcome}}")],
    low=0,
)

TTFT_TEXT = "Time to first token, p50 and p99, of completed user requests (per model) and probes."
TBT_TEXT = "Time between tokens, p50 and p99: every gap after the first token, users and probes."
users_vs_probes = Section(
    "Users vs probes (real traffic through Envoy)",
    [
        Cell(fluidity_level, 12),
        Cell(fluid_share, 12),
        side_by_side(
            "TTFT: users vs probes",
            TTFT_TEXT,
            "Users' is measured from the end of the request body as Envoy passed it.",
            "TTFT",
            SECONDS,
            "Good: under the prefill deadline of the SLO.",
        ),
        side_by_side(
            "TBT: users vs probes",
            TBT_TEXT,
            "A p99 far above the p50 is stalls.",
            "TBT",
            SECONDS,
            "Good: p99 under the decode tier's deadline (50 ms for medium).",
        ),
        side_by_side(
            "TPOT: users vs probes",
            "Time per output token, p50 and p99: (E2E - TTFT) / (tokens - 1), users and probes.",
            "No stalls: a request's mean, where TBT shows its gaps.",
            "TPOT",
            SECONDS,
            "Good: p99 under the decode tier's deadline.",
        ),
        side_by_side(
            "E2E latency: users vs probes",
            "End-to-end latency, p50 and p99, users (end of request body to end of stream) and probes.",
            "Grows with answer length: the users' answers are rarely the probes' length.",
            "E2E",
            SECONDS,
            "Good: stable over time.",
        ),
        side_by_side(
            "Normalized latency: users vs probes",
            "End-to-end latency per output token, p50 and p99, users and probes.",
            "Comparable across answer lengths, unlike E2E.",
            "NORMALIZED_LATENCY",
            SECONDS,
            "Good: well below the decode deadline.",
        ),
        Cell(goodput, 12),
        Cell(users_fluidity, 12),
        Cell(volume, 12),
        Cell(tokens, 12),
        Cell(window_users, 12),
        Cell(window_volume, 12),
        Cell(users_burn, 24, 5),
    ],
)

exchanges = timeseries(
    "Exchanges Envoy sent the observer",
    "Per second: user requests the observer measured, and the exchanges it left out, by reason: not_llm "
    "(another route), probe (the exporter's own), not_streaming, and the dropped ones (over_capacity, "
    "too_large, incomplete, error). All at 0 while the engine serves requests: Envoy does not reach the "
    "observer, or traffic bypasses Envoy (FluidityTrafficNotObserved). Good: measured follows the "
    "engine's request rate, dropped ones at 0.",
    REQUESTS_PER_SECOND,
    [
        Query(sum_rate(names.TRAFFIC_REQUESTS, IDENTITY, ALL), "measured"),
        Query(sum_rate(names.TRAFFIC_SKIPPED, (*IDENTITY, "reason"), ALL), "{{reason}}"),
    ],
    low=0,
    stacked=True,
)
dropped = timeseries(
    "Streams left unmeasured",
    "Share of the LLM streams Envoy sent that the observer let pass unmeasured for its own limits or a "
    "bug (over traffic.max_streams, too large, incomplete, error), per exporter, over 30 minutes. Users "
    "are not affected (the observer is never on the data path); their figures leave these streams out. "
    "FluidityTrafficStreamsDropped opens a ticket above 5%. Good: 0.",
    RATIO,
    [Query("instance:fluidity_traffic_dropped_streams:ratio_rate30m", "{{instance}}")],
    low=0,
    thresholds=steps("green", (0.05, "red")),
)
in_flight = timeseries(
    "Streams followed now",
    "Exchanges the observer follows at this moment, per exporter; it lets more than traffic.max_streams "
    "through unobserved (counted as over_capacity). Good: well under the cap.",
    COUNT,
    [Query(names.TRAFFIC_IN_FLIGHT.name, "{{instance}}")],
    low=0,
)
seen_over_range = stat(
    "Exchanges from Envoy over the time range",
    "Every exchange Envoy sent the observer in the selected range, measured or not. 0 (or no data) with "
    "a traffic: section configured: Envoy is not connected to the observer. Good: above 0 whenever users "
    "were served.",
    COUNT,
    [
        Query(
            f"sum by ({', '.join(IDENTITY)}) (increase({names.TRAFFIC_SKIPPED.name}[$__range])) + "
            f"(sum by ({', '.join(IDENTITY)}) (increase({names.TRAFFIC_REQUESTS.name}[$__range])) or "
            f"0 * sum by ({', '.join(IDENTITY)}) (increase({names.TRAFFIC_SKIPPED.name}[$__range])))",
            "{{job}}",
            instant=True,
        )
    ],
    thresholds=steps("red", (1.0, "green")),
    sparkline=False,
)
envoy_streams = timeseries(
    "ext_proc streams from Envoy, by how they ended",
    "Per second: the streams Envoy opened to the observer (one per HTTP exchange) by how each ended: "
    "observed (a user request recorded), unreliable (recorded, its timings flagged), probe, not_llm, "
    "not_streaming, dropped. Good: observed follows the users' request rate, unreliable and dropped "
    "near 0.",
    REQUESTS_PER_SECOND,
    [Query(sum_rate(names.TRAFFIC_ENVOY_STREAMS, (*IDENTITY, "state"), ALL), "{{state}}")],
    low=0,
    stacked=True,
)
envoy_connected = timeseries(
    "Envoy connected, and its last message",
    "Envoy connections with an ext_proc stream open now (0 while no request passes, or while Envoy "
    "cannot reach the observer), and the seconds since Envoy's last message (right axis). Good: "
    "connections above 0 and a last message seconds old whenever users send requests.",
    COUNT,
    [
        Query(names.TRAFFIC_ENVOY_CONNECTIONS.name, "connections {{instance}}"),
        Query(f"time() - {names.TRAFFIC_LAST_MESSAGE.name}", "since last message {{instance}}"),
    ],
    low=0,
    overrides=[unit_override("B", SECONDS)],
)
unreliable = timeseries(
    "Unreliably timed user requests",
    "Share of observed user requests whose timings the observer flagged, by the probe client's rule: "
    "its event loop was late while the stream was open, or Envoy passed chunks holding several token "
    "events (a buffering filter before the observer). They count in every figure all the same. Good: "
    "near 0; more than a few percent means the exporter needs CPU or a filter buffers the stream.",
    RATIO,
    [
        Query(
            f"{sum_rate(names.TRAFFIC_UNRELIABLE, USERS, ALL)} / {sum_rate(names.TRAFFIC_REQUESTS, USERS, ALL)}",
            USERS_LEGEND,
        )
    ],
    low=0,
)
agreement = timeseries(
    "Observer vs client on the probes' own requests",
    "The exporter's probes, seen by their client and by the observer, joined on the request id: p99 of "
    "|observer gap - client gap| (right axis), compared requests per second, requests judged fluid by "
    "one view only, and requests only one side saw (by side). A continuous check of the observer's "
    "accuracy. Good: a p99 difference well under 1 ms and no verdict differences.",
    REQUESTS_PER_SECOND,
    [
        Query(
            f"histogram_quantile(0.99, sum by ({', '.join(('le', *IDENTITY))}) "
            f"(rate({names.TRAFFIC_PROBE_GAP_DIFFERENCE.name}_bucket[$__rate_interval])))",
            "gap difference p99",
        ),
        Query(sum_rate(names.TRAFFIC_PROBE_COMPARED, IDENTITY, ALL), "compared"),
        Query(sum_rate(names.TRAFFIC_PROBE_VERDICT_DIFFERENCES, IDENTITY, ALL), "verdict differs"),
        Query(sum_rate(names.TRAFFIC_PROBE_UNMATCHED, (*IDENTITY, "side"), ALL), "only the {{side}} saw it"),
    ],
    low=0,
    overrides=[unit_override("A", SECONDS)],
)
observer_health = Section(
    "Traffic observer (Envoy ext_proc)",
    [
        Cell(exchanges, 12),
        Cell(envoy_streams, 12),
        Cell(envoy_connected, 12),
        Cell(dropped, 12),
        Cell(unreliable, 12),
        Cell(agreement, 12),
        Cell(in_flight, 16, 6),
        Cell(seen_over_range, 8, 6),
    ],
)

dashboard = new_dashboard(
    "Fluidity / Traffic",
    "fluidity-traffic",
    "What real users felt, observed through Envoy (ext_proc in observability mode), beside what the "
    "probes felt, and the health of the traffic observer (Fluidity Exporter).",
    variables(window=True, tier=True),
    [users_vs_probes, observer_health],
)
