"""Overview: what users of each (target, module) feel, from the exporter's probe metrics.

Fluidity first (service level per decode tier, fluidity-index percentiles, fluid token rate), then
goodput and SLOs, latency heatmaps and percentiles from the histograms, and the health of the probing
itself (outcomes, send lateness, scheduling, the exporter's event loop).
"""

from __future__ import annotations

from dashboards.common import (
    BURN_THRESHOLDS,
    BURN_WINDOWS,
    COUNT,
    ENGINE,
    FACTOR,
    FAILED,
    FROM_NOW,
    PROBE,
    RATIO,
    REQUESTS_PER_SECOND,
    RUNS_PER_SECOND,
    SECONDS,
    SERIES,
    STATE,
    TIERED,
    TOKENS_PER_SECOND,
    WINDOWED,
    Cell,
    Query,
    Section,
    heatmap,
    new_dashboard,
    percentile_queries,
    quantile,
    service_level,
    stat,
    state_timeline,
    steps,
    sum_rate,
    table,
    timeseries,
    value_text,
    variables,
)
from exporter.exposition import names

SERIES_LEGEND = "{{target}}/{{module}}"
TIER_LEGEND = "{{target}}/{{module}} {{tier}}"
FLUIDITY_STEPS = steps("red", (0.95, "orange"), (0.99, "green"))
SLO_TEXT = value_text({1: ("met", "green"), 0: ("missed", "red")})

service_level_now = stat(
    "Service-level fluidity over the time range",
    "Token-weighted fluidity of every probe request in the selected time range, per decode tier: "
    "1 - missed token deadlines / token deadlines (Etalon). A stall counts every deadline it spans. "
    "Good: at or above your target (0.99 means 1 token deadline in 100 missed) at the tier your users "
    "read at; strict (25 ms) is often lower than relaxed (100 ms).",
    RATIO,
    [Query(service_level(["tier"], window="$__range"), "{{tier}}", instant=True)],
    thresholds=FLUIDITY_STEPS,
    decimals=2,
    sparkline=False,
)
fluid_rate_now = stat(
    "Fluid token generation rate",
    "The highest playback rate (tokens/s) at which the configured percentile of the window's requests "
    "still reach the target decode-only fluidity: the speed users can read at without stalls. Good: "
    "above your users' reading speed (for chat, 5-10 tok/s is already comfortable); compare with the "
    "TPOT-based rate, which ignores stalls.",
    TOKENS_PER_SECOND,
    [Query(f"{names.WINDOW_FLUID_RATE.name}{WINDOWED}", SERIES_LEGEND)],
)
goodput_now = stat(
    "Goodput ratio (window)",
    "Share of the window's probe requests, failed ones included, that met every goodput bound "
    "(TTFT, TPOT... as configured). Good: close to 1; it falls both when requests fail and when they "
    "are slow.",
    RATIO,
    [Query(f"{names.WINDOW_GOODPUT.name}{WINDOWED}", SERIES_LEGEND)],
    thresholds=steps("red", (0.9, "orange"), (0.99, "green")),
    decimals=1,
)
slos_now = stat(
    "SLOs (window)",
    "Each configured SLO evaluated over the window's probe requests, a failed one at the worst value "
    "(as bench --objective judges it): met or missed. Absent while the window holds no request. Good: "
    "every one met.",
    STATE,
    [Query(f"{names.WINDOW_SLO_MET.name}{WINDOWED}", "{{module}} {{slo}}")],
    thresholds=steps("red", (1, "green")),
    mappings=SLO_TEXT,
    sparkline=False,
)

service_level_series = timeseries(
    "Service-level fluidity per decode tier",
    "1 - rate(fluidity_probe_deadlines_missed_total) / rate(fluidity_probe_deadlines_total) per tier: the "
    "share of token deadlines met (the first token against Dp, later ones against the tier's Dd). Good: a "
    "flat line near 1; dips line up with load, preemptions or long prefills on the engine view.",
    RATIO,
    [Query(service_level([*SERIES, "tier"]), TIER_LEGEND)],
    thresholds=FLUIDITY_STEPS,
    high=1,
)
fluidity_percentiles = timeseries(
    "Fluidity-index percentiles per tier (histogram)",
    "Per-request fluidity-index (1 = every deadline met) from the histogram, summed over sidecars: p1 is "
    "the fluidity 99% of requests reach or exceed. Good: p1 at or above your target fluidity (the Etalon "
    "paper uses 0.9); a low p1 with a high p50 means a minority of requests stall badly. Bucket-resolution "
    "limited.",
    RATIO,
    [
        Query(quantile(q, names.PROBE_FLUIDITY, [*SERIES, "tier"]), f"{TIER_LEGEND} p{q * 100:g}")
        for q in (0.01, 0.1, 0.5)
    ],
    high=1,
)
window_fluidity = timeseries(
    "Fluidity over the window (exact)",
    "The fluidity-index percentiles computed exactly (nearest rank) over the rolling window's requests at "
    "scrape time, and the window's token-weighted service level per tier: an SLO fluidity:p99>=X holds "
    "exactly when p1 >= X. Not summable across sidecars. Good: p1 above your target fluidity, service "
    "level near 1.",
    RATIO,
    [
        Query(f"{names.WINDOW_FLUIDITY.name}{WINDOWED}", "{{target}}/{{module}} {{tier}} p{{percentile}}"),
        Query(f"{names.WINDOW_SERVICE_LEVEL.name}{WINDOWED}", "{{target}}/{{module}} {{tier}} service level"),
    ],
    high=1,
)
fluidity_heatmap = heatmap(
    "Per-request fluidity-index, tier $tier",
    "How the fluidity-index of single requests spreads at the selected decode tier: each column is a time "
    "slice, each cell a histogram bucket, the colour how many requests fell in it. Good: everything in the "
    "top bucket (1.0); cells further down are requests that stalled.",
    names.PROBE_FLUIDITY,
    unit=RATIO,
    selector=TIERED,
)

fluid_rate_series = timeseries(
    "Fluid token generation rate",
    "The fluid token generation rate of the window (see the stat above) next to 1 / TPOT p50, the rate a "
    "TPOT-based report would claim. Good: the fluid rate close to the TPOT-based one; a large gap means "
    "stalls (long prefills of other requests, preemptions) that averages hide.",
    TOKENS_PER_SECOND,
    [
        Query(f"{names.WINDOW_FLUID_RATE.name}{WINDOWED}", f"{SERIES_LEGEND} fluid"),
        Query(f"1 / {quantile(0.5, names.PROBE_TPOT)}", f"{SERIES_LEGEND} 1/TPOT p50"),
    ],
)
goodput_series = timeseries(
    "Goodput ratio",
    "Share of probe requests that met every goodput bound: from the counters "
    "(rate(fluidity_probe_good_requests_total) / rate(fluidity_probe_requests_total), summable across "
    "sidecars) and as the window gauge. Failed requests count as not good. Good: close to 1.",
    RATIO,
    [
        Query(
            f"{sum_rate(names.PROBE_GOOD_REQUESTS, SERIES)} / {sum_rate(names.PROBE_REQUESTS, SERIES)}",
            f"{SERIES_LEGEND} counters",
        ),
        Query(f"{names.WINDOW_GOODPUT.name}{WINDOWED}", f"{SERIES_LEGEND} window"),
    ],
    high=1,
    thresholds=steps("red", (0.9, "orange"), (0.99, "green")),
)
slo_timeline = state_timeline(
    "SLO state over time",
    "Each configured SLO over the rolling window, met (green) or missed (red), per target and module. "
    "Good: all green; a red band says when users were let down and for how long.",
    [Query(f"{names.WINDOW_SLO_MET.name}{WINDOWED}", "{{target}}/{{module}} {{slo}}")],
    SLO_TEXT,
)

# --- The SLO row: what the burn-rate alerts of deploy/prometheus/rules/ read, from the same recording
# rules, so that a page and the dashboard tell the same story. ------------------------------------------

BURN_COLOURS = ("yellow", "orange", "red", "dark-red")  # from the ticket's 1 to the page's 14.4
SLO_PERIOD = "30d"
SLO_SERIES = '{target=~"$target",module=~"$module"}'
FLUIDITY_ALERTS = '{alertname=~"Fluidity.+"}'


def burn_rate(window: str) -> str:
    return f"target_module_tier:fluidity_slo_burn_rate:ratio_rate{window}{SLO_SERIES}"


def budget_left(period: str = SLO_PERIOD) -> str:
    """1 - the period's burn rate: the share of the period's error budget not yet spent (negative when
    overspent), per tier with an objective, from the counters (no recording rule covers 30 days)."""
    labels = [*SERIES, "tier"]
    missed = (
        f"sum by ({', '.join(labels)}) (increase({names.PROBE_DEADLINES_MISSED.name}{SLO_SERIES}[{period}]))"
    )
    total = f"sum by ({', '.join(labels)}) (increase({names.PROBE_DEADLINES.name}{SLO_SERIES}[{period}]))"
    return f"1 - ({missed} / ({total} > 0)) / on (tier) group_left () (1 - fluidity:slo_objective:ratio)"


burn_rates = timeseries(
    "Error-budget burn rate per window",
    "The burn rate of every window the alerts read (missed token deadlines over the share the objective "
    "allows; 1 spends the 30-day budget exactly), against the alerts' thresholds (dashed): a pair pages "
    "or opens a ticket when both its windows are above its threshold, 1h and 5m above 14.4 or 6h and "
    "30m above 6 (page), 1d and 2h above 3 or 3d and 6h above 1 (ticket). The 6h, 1d and 3d lines appear "
    "once a series has that much history. Good: every line under 1.",
    FACTOR,
    [Query(burn_rate(window), f"{{{{target}}}}/{{{{module}}}} {window}") for window in BURN_WINDOWS],
    low=0,
    thresholds=steps(
        "green", *zip(sorted(limit for _, _, limit in BURN_THRESHOLDS), BURN_COLOURS, strict=True)
    ),
)
budget_remaining = stat(
    "Error budget left (30 days)",
    "Share of the 30-day error budget not yet spent, per tier with an objective: 1 - missed deadlines / "
    "deadlines over 30 days, divided by the share the objective allows (fluidity:slo_objective:ratio). "
    "Negative when overspent. A series younger than 30 days shows the budget of the days it has. Good: "
    "well above 0; under 0.25 the slow-burn tickets are due.",
    RATIO,
    [Query(budget_left(), TIER_LEGEND, instant=True)],
    thresholds=steps("red", (0.0, "orange"), (0.25, "green")),
    decimals=1,
    sparkline=False,
)
alerts_firing = stat(
    "Fluidity alerts firing",
    "How many alerts of deploy/prometheus/rules/fluidity-alerts.yml fire now, whatever their target (the "
    "exporter's own alerts have none). Good: 0.",
    COUNT,
    [
        Query(
            'count(ALERTS{alertname=~"Fluidity.+",alertstate="firing"}) or vector(0)',
            "firing",
            instant=True,
        )
    ],
    thresholds=steps("green", (1.0, "red")),
    sparkline=False,
)
alerts_table = table(
    "Fluidity alerts, firing and pending",
    "Every alert of the fluidity rules that fires or is pending (waiting out its `for`), with its labels: "
    "severity, the window pair of a burn-rate alert, target and module. Good: empty.",
    STATE,
    [Query(f"ALERTS{FLUIDITY_ALERTS}", format="table", instant=True)],
    transformations=[
        {"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True, "__name__": True}}}
    ],
)


def latency_heatmap(title: str, spec: names.MetricSpec, meaning: str, good: str) -> Cell:
    return Cell(
        heatmap(
            f"{title} heatmap", f"{meaning} Each column is a time slice, each cell a bucket. {good}", spec
        ),
        8,
    )


def latency_percentiles(title: str, spec: names.MetricSpec, meaning: str, good: str) -> Cell:
    description = f"{meaning} p50/p90/p99 from the histogram, summed over sidecars. {good}"
    return Cell(
        timeseries(f"{title} percentiles", description, SECONDS, percentile_queries(spec, (0.5, 0.9, 0.99))),
        8,
    )


TTFT = "Time to first token of completed probe requests, from the request write: queueing plus prefill."
TBT = "Time between tokens after the first: every gap a reader sees (0 s for tokens sharing a chunk)."
TPOT = "Time per output token, (E2E - TTFT) / (tokens - 1): the average decode pace of a request."
TTFT_GOOD = "Good: below your prefill deadline (Dp) for the prompt lengths of this module."
TBT_GOOD = "Good: nearly all below the decode tier's deadline; a tail far above it is a stall."
TPOT_GOOD = "Good: well below the decode deadline; TPOT hides stalls, so read it with the fluidity panels."

outcomes = timeseries(
    "Request outcomes",
    "Probe requests per second by how they ended: ok, or the failure reason (http_status, rate_limited, "
    "connect_error, ttft_timeout, idle_timeout, total_timeout, stream_aborted, malformed_stream, "
    "no_tokens, truncated, overlong, too_large). Good: only ok.",
    REQUESTS_PER_SECOND,
    [Query(f"{sum_rate(names.PROBE_REQUESTS, ['outcome'])} > 0", "{{outcome}}")],
    stacked=True,
    bars=True,
)
failure_ratio = timeseries(
    "Failed, resent and unreliable request ratio",
    "Share of probe requests that did not end ok. Failed requests never reach the latency and fluidity "
    "histograms, so a target that fails fast can look fluid: read this beside them. Good: 0. Resent: "
    "requests whose reused keep-alive connection the server had closed while idle (llama.cpp and "
    "uvicorn close after 5 s), sent again on a fresh connection and counted by how that ended; harmless, "
    "but each one paid a new connection in its TTFT. Unreliable: requests whose timings the probe's own "
    "client flagged (it read chunks of a stream together while its event loop was late); they are in "
    "the latency and fluidity panels all the same, so more than a few percent means the exporter needs "
    "more CPU (or its machine stalls) before those tails can be trusted.",
    RATIO,
    [
        Query(
            f"{sum_rate(names.PROBE_REQUESTS, SERIES, FAILED)} / {sum_rate(names.PROBE_REQUESTS, SERIES)}",
            SERIES_LEGEND,
        ),
        Query(
            f"{sum_rate(names.PROBE_RETRIES, SERIES)} / {sum_rate(names.PROBE_REQUESTS, SERIES)}",
            SERIES_LEGEND + " resent",
        ),
        Query(
            f"{sum_rate(names.PROBE_UNRELIABLE, SERIES)} / {sum_rate(names.PROBE_REQUESTS, SERIES)}",
            SERIES_LEGEND + " unreliable",
        ),
    ],
    thresholds=steps("green", (0.01, "red")),
)
lateness = timeseries(
    "Probe send lateness",
    "How late the prober itself sent requests after their scheduled time, percentiles over the window. "
    "High values mean the exporter (its CPU or event loop), not the target, is slow, and the probe "
    "timings are less trustworthy. Good: a few milliseconds.",
    SECONDS,
    [Query(f"{names.WINDOW_LATENESS.name}{WINDOWED}", "{{target}}/{{module}} p{{percentile}}")],
    thresholds=steps("green", (0.05, "red")),
)
last_success = stat(
    "Last successful probe",
    "When a scheduled probe run last stored at least one completed request. Good: about one probe "
    "interval ago; much older means the target fails, its budget ran out or its probes are paused by a job.",
    FROM_NOW,
    [Query(f"{names.PROBE_LAST_SUCCESS.name}{PROBE} * 1000", SERIES_LEGEND)],
    sparkline=False,
)
probe_jobs = timeseries(
    "Probe scheduling problems",
    "Scheduled probe runs per second that raised (a bug of the exporter, logged with its traceback), "
    "misfired (started later than the misfire grace allows) or were skipped (the previous run was still "
    "going: the interval is shorter than a probe). Good: all 0.",
    RUNS_PER_SECOND,
    [
        Query(
            f'sum by (job_id) (rate({spec.name}{{job_id=~"probe:$target:$module"}}[$__rate_interval]))',
            f"{{{{job_id}}}} {kind}",
        )
        for spec, kind in (
            (names.JOB_ERRORS, "errors"),
            (names.JOB_MISFIRES, "misfires"),
            (names.JOB_SKIPPED, "skipped"),
        )
    ],
)
loop_lag = timeseries(
    "Exporter event-loop lag",
    "How late the exporter's event loop woke up for a periodic timer (p50 and p99, every sidecar). "
    "Timings stamped on reading (TLS targets) include this delay; kernel-stamped ones (plain TCP on "
    "Linux) do not, but chunks of a stream read together share a stamp. Good: a few milliseconds; tens "
    "of milliseconds make TBT and fluidity look worse than the target is.",
    SECONDS,
    [
        Query(
            f"histogram_quantile({q}, sum by (le, instance) "
            f"(rate({names.EVENT_LOOP_LAG.name}_bucket[$__rate_interval])))",
            f"{{{{instance}}}} p{q * 100:g}",
        )
        for q in (0.5, 0.99)
    ],
    thresholds=steps("green", (0.02, "red")),
)
jobs_running = timeseries(
    "Capacity and profiling jobs running",
    "Jobs running against the target (capacity searches and prefill profiles send heavy load, and the "
    "target's scheduled probes pause meanwhile). Good: 0 outside planned runs; explains gaps and spikes "
    "in every other panel.",
    COUNT,
    [Query(f"{names.JOB_RUNNING.name}{ENGINE}", "{{target}} {{kind}}")],
    step=True,
)

calibration_requests = stat(
    "Prompt-calibration requests over the time range",
    "Requests the exporter sent to fit each target's prompt lengths to its tokenizer (after a start, a "
    "reload or a failed fit; simulated targets need none), charged to the target's budget like probes. "
    "Good: a few per restart; a count that keeps growing means the fit keeps failing, so probe prompts "
    "are not the lengths the modules ask for.",
    COUNT,
    [
        Query(
            f"round(sum by (target) (increase({names.CALIBRATION_REQUESTS.name}{ENGINE}[$__range])))",
            "{{target}}",
        )
    ],
    sparkline=False,
)
calibration_seconds = stat(
    "Prompt-calibration time over the time range",
    "Seconds spent calibrating each target's prompts; the first probe after a start or reload waits "
    "on it, for a bounded time. Good: a few seconds per restart.",
    SECONDS,
    [Query(f"sum by (target) (increase({names.CALIBRATION_SECONDS.name}{ENGINE}[$__range]))", "{{target}}")],
    sparkline=False,
)

TURNS = (*SERIES, "turn")
turn_ttft = timeseries(
    "TTFT of first turns and follow-ups",
    "Time to first token of a session's first request and of its later turns (p50 and p99), which "
    "re-send the whole conversation so far. A follow-up's prompt is longer, but what the engine has "
    "seen comes from its prefix cache, so follow-ups should be no slower than first turns. Good: "
    "follow-ups at or below first turns; follow-ups far slower mean the prefix cache misses "
    "(evicted, or routed to another replica). Empty for modules without turns.",
    SECONDS,
    [
        Query(
            quantile(q, names.PROBE_TURN_TTFT, TURNS),
            f"{{{{target}}}}/{{{{module}}}} {{{{turn}}}} p{q * 100:g}",
        )
        for q in (0.5, 0.99)
    ],
)
cache_hits = timeseries(
    "Prompt tokens served from the prefix cache",
    "Share of prompt tokens the server reported as cached, for first turns and follow-ups of the probes "
    "(usage cached_tokens; llama.cpp's cache_n), beside the engine's own hit ratio over all its traffic "
    "(vLLM: prefix-cache hits / queries; llama.cpp: cached / (cached + evaluated) prompt tokens). Good: "
    "follow-ups close to 1 minus their new message's share; first turns near 0 (probe prompts are "
    "unique). Servers that do not report cached tokens (vLLM without --enable-prompt-tokens-details) "
    "show only the engine's line.",
    RATIO,
    [
        Query(
            f"{sum_rate(names.PROBE_PROMPT_CACHED_TOKENS, TURNS)} / {sum_rate(names.PROBE_PROMPT_TOKENS, TURNS)}",
            "{{target}}/{{module}} {{turn}}",
        ),
        Query(
            f"{sum_rate(names.ENGINE_PREFIX_CACHE_HITS, ['target'], ENGINE)} / "
            f"({sum_rate(names.ENGINE_PREFIX_CACHE_QUERIES, ['target'], ENGINE)} or "
            f"({sum_rate(names.ENGINE_PREFIX_CACHE_HITS, ['target'], ENGINE)} + "
            f"{sum_rate(names.ENGINE_PROMPT_TOKENS, ['target'], ENGINE)}))",
            "{{target}} engine",
        ),
    ],
    high=1,
)

dashboard = new_dashboard(
    "Fluidity / Overview",
    "fluidity-overview",
    "What users of each LLM endpoint feel: Etalon fluidity-index and fluid token rate, goodput, SLOs, "
    "latency, and the health of the probes (Fluidity Exporter).",
    variables(window=True, tier=True),
    [
        Section(
            "Fluidity",
            [
                Cell(service_level_now, 6, 5),
                Cell(fluid_rate_now, 6, 5),
                Cell(goodput_now, 6, 5),
                Cell(slos_now, 6, 5),
                Cell(service_level_series, 12),
                Cell(fluidity_percentiles, 12),
                Cell(window_fluidity, 12),
                Cell(fluidity_heatmap, 12),
            ],
        ),
        Section(
            "Error budget (the SLO alerts)",
            [
                Cell(budget_remaining, 12, 5),
                Cell(alerts_firing, 12, 5),
                Cell(burn_rates, 24, 9),
                Cell(alerts_table, 24, 6),
            ],
        ),
        Section(
            "Fluid token rate, goodput and SLOs",
            [Cell(fluid_rate_series, 12), Cell(goodput_series, 12), Cell(slo_timeline, 24, 6)],
        ),
        Section(
            "Latency",
            [
                latency_heatmap("TTFT", names.PROBE_TTFT, TTFT, TTFT_GOOD),
                latency_heatmap("TBT", names.PROBE_TBT, TBT, TBT_GOOD),
                latency_heatmap("TPOT", names.PROBE_TPOT, TPOT, TPOT_GOOD),
                latency_percentiles("TTFT", names.PROBE_TTFT, TTFT, TTFT_GOOD),
                latency_percentiles("TBT", names.PROBE_TBT, TBT, TBT_GOOD),
                latency_percentiles("TPOT", names.PROBE_TPOT, TPOT, TPOT_GOOD),
                Cell(
                    timeseries(
                        "E2E latency percentiles",
                        "End-to-end latency of completed probe requests, request write to end of stream "
                        "(p50/p90/p99). Grows with output length: compare modules with normalized latency. "
                        "Good: stable over time for a module.",
                        SECONDS,
                        percentile_queries(names.PROBE_E2E, (0.5, 0.9, 0.99)),
                    ),
                    12,
                ),
                Cell(
                    timeseries(
                        "Normalized latency percentiles",
                        "End-to-end latency divided by output tokens, per request (p50/p90/p99): seconds "
                        "per token including the wait for the first. Good: well below the decode deadline.",
                        SECONDS,
                        percentile_queries(names.PROBE_NORMALIZED_LATENCY, (0.5, 0.9, 0.99)),
                    ),
                    12,
                ),
            ],
        ),
        Section("Conversations (multi-turn sessions)", [Cell(turn_ttft, 12), Cell(cache_hits, 12)]),
        Section(
            "Requests and probing",
            [
                Cell(outcomes, 12),
                Cell(failure_ratio, 12),
                Cell(lateness, 8),
                Cell(probe_jobs, 8),
                Cell(loop_lag, 8),
                Cell(last_success, 8, 6),
                Cell(jobs_running, 16, 6),
                Cell(calibration_requests, 12, 5),
                Cell(calibration_seconds, 12, 5),
            ],
        ),
    ],
)
