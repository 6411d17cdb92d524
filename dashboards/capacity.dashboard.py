"""Capacity: the results of capacity searches and prefill profiles over time, and the trials of the
latest search.

Job results are gauges of the latest finished job (``fluidity_capacity_*`` per (target, module),
``fluidity_prefill_profile_*`` per target), so their history is Prometheus' history of those gauges: a
step down after a deployment is a capacity regression. Panels about the latest search use instant
queries, so that trials of an older, longer search never linger.
"""

from __future__ import annotations

from typing import Any

from dashboards.common import (
    COUNT,
    ENGINE,
    FACTOR,
    FROM_NOW,
    PROBE,
    RATIO,
    REQUESTS_PER_SECOND,
    SECONDS,
    STATE,
    TOKENS_PER_SECOND,
    Cell,
    Query,
    Section,
    bar_gauge,
    new_dashboard,
    stat,
    steps,
    table,
    timeseries,
    unit_override,
    value_text,
    variables,
)
from exporter.exposition import names
from exporter.exposition.job_gauges import CAPACITY_STOPS
from exporter.exposition.names import MetricSpec

SERIES_LEGEND = "{{target}}/{{module}}"
PASSED_TEXT = value_text({1: ("pass", "green"), 0: ("fail", "red")})
HEADROOM_STEPS = steps("red", (1, "green"))


def latest(spec: MetricSpec, selector: str = PROBE) -> str:
    return f"{spec.name}{selector}"


def table_of(values: dict[str, str], number_field: str, hidden: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Transformations that merge instant table queries into one row per label set, hide the scrape's
    labels, name each query's value column and sort by ``number_field`` as a number."""
    excluded = dict.fromkeys(("Time", "__name__", "job", "instance", *hidden), True)
    return [
        {"id": "merge", "options": {}},
        {"id": "organize", "options": {"excludeByName": excluded, "renameByName": values}},
        {
            "id": "convertFieldType",
            "options": {"conversions": [{"targetField": number_field, "destinationType": "number"}]},
        },
        {"id": "sortBy", "options": {"sort": [{"field": number_field, "desc": False}]}},
    ]


def by_name(name: str, *properties: dict[str, Any]) -> dict[str, Any]:
    return {"matcher": {"id": "byName", "options": name}, "properties": list(properties)}


capacity_rate = stat(
    "Capacity (rate searches)",
    "Highest arrival rate (requests/s) at which the SLO held in the latest rate search (Etalon's "
    "capacity: by default 99% of requests reach fluidity 0.9 at the medium tier), measured: absent after a "
    "search that found only a lower bound, was inconclusive, passed nowhere or rests on timings the "
    "client distrusted (see Search result). It holds for bursts as long as the search's trials: a load "
    "kept up for hours can queue below it. Good: at or above the peak load one replica must take, with "
    "headroom, stable across deployments.",
    REQUESTS_PER_SECOND,
    [Query(latest(names.CAPACITY_RATE), SERIES_LEGEND)],
    decimals=2,
)
capacity_concurrency = stat(
    "Capacity (concurrency searches)",
    "Highest number of requests in flight at which the SLO held in the latest concurrency (closed loop) "
    "search, measured: absent unless the search ended found on timings the client trusted (see Search "
    "result). Good: at or above the "
    "concurrency one replica must serve.",
    COUNT,
    [Query(latest(names.CAPACITY_CONCURRENCY), SERIES_LEGEND)],
    decimals=1,
)
fluid_rate = stat(
    "Fluid token rate at capacity",
    "Fluid token generation rate measured at the search's lower end: the capacity when the search found "
    "it on trusted timings, else the highest load that passed (a lower bound, or timings the client "
    "distrusted: see Search result). How fast output can be played back smoothly to "
    "most users when the replica is as busy as the SLO allows. Good: above your users' reading speed.",
    TOKENS_PER_SECOND,
    [Query(latest(names.CAPACITY_FLUID_RATE), SERIES_LEGEND)],
    decimals=1,
)
goodput_ratio = stat(
    "Goodput ratio at capacity",
    "Share of the requests at the capacity load (the lower bound's load when the search found no "
    "capacity: Search result says) that met every goodput bound. Good: close to 1.",
    RATIO,
    [Query(latest(names.CAPACITY_GOODPUT_RATIO), SERIES_LEGEND)],
    thresholds=steps("red", (0.9, "orange"), (0.99, "green")),
    decimals=1,
)
goodput_rate = stat(
    "Goodput at capacity",
    "Requests per second that met every goodput bound at the capacity load (the lower bound's load when "
    "the search found no capacity: Search result says): the useful throughput of one replica. Good: "
    "stable or rising across deployments.",
    REQUESTS_PER_SECOND,
    [Query(latest(names.CAPACITY_GOODPUT_RATE), SERIES_LEGEND)],
    decimals=2,
)
# fluidity_capacity_state as one number per (target, module), for the value mappings below.
STATE_CODES = {"found": 1, "lower_bound": 2, "inconclusive": 3, "not_met": 4}
UNRELIABLE_CODE = 5  # fluidity_capacity_unreliable_timings x 5, beside the state (0: trusted)
STATE_QUERY = " or ".join(
    f'({names.CAPACITY_STATE.name}{{target=~"$target",module=~"$module",state="{state}"}} == 1) * {code}'
    for state, code in STATE_CODES.items()
)
# fluidity_capacity_stopped_by as one number, beside them (exporter.exposition.job_gauges.CAPACITY_STOPS).
STOP_CODES = {reason: 10 + index for index, reason in enumerate(CAPACITY_STOPS)}
STOP_QUERY = " or ".join(
    f'({names.CAPACITY_STOPPED_BY.name}{{target=~"$target",module=~"$module",reason="{reason}"}} == 1) * {code}'
    for reason, code in STOP_CODES.items()
)
found = stat(
    "Search result",
    "How the latest search ended. found: a confident pass below a confident failure within the "
    "tolerance, the capacity is measured. lower bound: still passing when the load ceiling, the trials "
    "or a budget stopped it (the capacity is at least the lower bound: raise max_load or the budget). "
    "inconclusive: bracketed, but a pass fraction's interval straddles the objective (more requests per "
    "trial). not met: no load tried passed (stopped by the floor: the SLO is met at no load it may try; "
    "by its trials or a budget: the capacity is only below the lowest failure). Beside it, 'timings "
    "unreliable' when a trial at either end had more than 1% of its requests flagged by the probe's own "
    "client (it read chunks together while late, or was saturated: give it more CPU), else 'timings "
    "trusted', and what stopped the search. Only 'found' with trusted timings exports a capacity, and "
    "only it, or 'not met' stopped by the floor (a 0), moves the regression alert; the figures 'at "
    "capacity' are the lower bound's otherwise. Good: found, timings trusted, stopped: converged.",
    STATE,
    [
        Query(STATE_QUERY, SERIES_LEGEND),
        Query(f"{latest(names.CAPACITY_UNRELIABLE_TIMINGS)} * {UNRELIABLE_CODE}", f"{SERIES_LEGEND} timings"),
        Query(STOP_QUERY, f"{SERIES_LEGEND} stopped by"),
    ],
    thresholds=steps("green", (2, "orange"), (4, "red")),
    mappings=value_text(
        {
            1: ("found", "green"),
            2: ("lower bound", "orange"),
            3: ("inconclusive", "orange"),
            4: ("not met", "red"),
            0: ("timings trusted", "green"),
            UNRELIABLE_CODE: ("timings unreliable", "red"),
            **{code: (f"stopped: {reason.replace('_', ' ')}", "blue") for reason, code in STOP_CODES.items()},
        }
    ),
    sparkline=False,
)
bounds = stat(
    "Capacity bracket",
    "The highest load that passed (at least) and the lowest that failed (less than), requests/s or "
    "requests in flight: the capacity lies between. With a lower bound only, the first is all that is "
    "known. Good: close together.",
    COUNT,
    [
        Query(latest(names.CAPACITY_LOWER_BOUND), f"{SERIES_LEGEND} at least"),
        Query(latest(names.CAPACITY_UPPER_BOUND), f"{SERIES_LEGEND} less than"),
    ],
    decimals=2,
    sparkline=False,
)
predicted = stat(
    "Predicted capacity (engine model)",
    "The load the engine model fitted to the search's own trials predicts (decode gap W + H n by running "
    "requests, Little's law, the headroom calibrated per trial), with its interval, beside the measured "
    "bracket, and how far it lay from the measured lower bound. The prediction is information beside "
    "the answer (it places no trial); only measured trials give the answer. Good: its error small (the "
    "model of the engine holds near its knee).",
    COUNT,
    [
        Query(latest(names.CAPACITY_PREDICTED_LOAD), f"{SERIES_LEGEND} predicted {{{{end}}}}"),
        Query(f"{latest(names.CAPACITY_PREDICTION_ERROR)} * 100", f"{SERIES_LEGEND} error %"),
    ],
    decimals=2,
    sparkline=False,
)
COST_LEGEND = "{{target}}/{{module}} at {{at}}"
goodput_tokens = stat(
    "Fluid goodput",
    "Output tokens per second of the requests that met the SLO, at the capacity and at the highest load "
    "tried: what the replica serves within the SLO, and what more load would buy. Good: the capacity's "
    "close to the highest load's (pushing past the capacity buys little).",
    TOKENS_PER_SECOND,
    [Query(latest(names.CAPACITY_FLUID_GOODPUT), COST_LEGEND)],
    decimals=0,
    sparkline=False,
)
per_gpu = stat(
    "Fluid tokens per GPU-second",
    "Fluid goodput over the GPUs the target declares (targets[].gpus): the SLO-meeting output one GPU "
    "yields per second. Good: stable or rising across deployments.",
    COUNT,
    [Query(latest(names.CAPACITY_TOKENS_PER_GPU_SECOND), COST_LEGEND)],
    decimals=1,
    sparkline=False,
)
token_cost = stat(
    "Cost of a million fluid tokens",
    "targets[].gpu_hour_price / 3600 / fluid tokens per GPU-second x 1e6, in the price's currency: the "
    "cost of a million output tokens served within the SLO, at the capacity and at the highest load tried "
    "(the gap is the price of the SLO). Good: low, and close to the highest load's.",
    COUNT,
    [Query(f"{latest(names.CAPACITY_TOKEN_COST)} * 1e6", COST_LEGEND)],
    decimals=3,
    sparkline=False,
)
live_per_gpu = timeseries(
    "Generated tokens per GPU-second (live)",
    "The engines' own generation counters over the GPUs their replicas declare, over the rate interval, "
    "both summed over the replicas (each exporter scrapes its own engine and declares its replica's "
    "GPUs): what one GPU yields now, beside what it yields at capacity within the SLO. Good: below the "
    "capacity figure with room to spare at peak.",
    COUNT,
    [
        Query(
            f"sum by (target) (rate({names.ENGINE_GENERATION_TOKENS.name}{ENGINE}[$__rate_interval])) "
            f"/ sum by (target) ({names.TARGET_GPUS.name}{ENGINE})",
            "{{target}}",
        )
    ],
)
last_search = stat(
    "Last search",
    "When the latest capacity search finished. Good: as recent as its schedule (nightly, or after each "
    "deployment); an old result may no longer describe the running build.",
    FROM_NOW,
    [Query(f"{latest(names.CAPACITY_TIMESTAMP)} * 1000", SERIES_LEGEND)],
    sparkline=False,
)

capacity_history = timeseries(
    "Capacity over time",
    "The capacity measured by each search, held until the next one: requests/s for rate searches (left "
    "axis), requests in flight for concurrency searches (right axis); a search that only found a lower "
    "bound (or was inconclusive, or its timings unreliable) shows its lower bound as 'at least', apart. "
    "Good: flat or rising; a "
    "step down after a deployment is a capacity regression.",
    REQUESTS_PER_SECOND,
    [
        Query(latest(names.CAPACITY_RATE), f"{SERIES_LEGEND} req/s"),
        Query(latest(names.CAPACITY_CONCURRENCY), f"{SERIES_LEGEND} in flight"),
        Query(
            f"{latest(names.CAPACITY_LOWER_BOUND)} unless on (target, module) "
            f"({names.CAPACITY_FOUND.name} == 1)",
            f"{SERIES_LEGEND} at least (not measured)",
        ),
    ],
    overrides=[unit_override("B", COUNT)],
    step=True,
)
fluid_rate_history = timeseries(
    "Fluid token rate at capacity over time",
    "The fluid token generation rate measured at each search's capacity load (its lower bound's load "
    "when it found no capacity). Good: flat or rising; it can fall while capacity holds, when the engine "
    "trades smoothness for throughput.",
    TOKENS_PER_SECOND,
    [Query(latest(names.CAPACITY_FLUID_RATE), SERIES_LEGEND)],
    step=True,
)
goodput_history = timeseries(
    "Goodput at capacity over time",
    "Goodput ratio (left axis) and goodput requests/s (right axis) at each search's capacity load (its "
    "lower bound's load when it found no capacity). Good: ratio near 1, rate flat or rising.",
    RATIO,
    [
        Query(latest(names.CAPACITY_GOODPUT_RATIO), f"{SERIES_LEGEND} ratio"),
        Query(latest(names.CAPACITY_GOODPUT_RATE), f"{SERIES_LEGEND} req/s"),
    ],
    overrides=[unit_override("B", REQUESTS_PER_SECOND)],
    step=True,
)

trials = table(
    "Trials of the latest search",
    "Every trial of the latest search per (target, module): the load it ran (requests/s for a rate "
    "search, requests in flight for a concurrency search), whether it passed on its point verdict (the "
    "measured share of fluid requests and every objective met, what steers the search: an inconclusive "
    "trial, whose pass-fraction interval straddles the objective, shows pass when its point verdict "
    "passed; each trial's interval verdict is in the job, GET /api/v1/jobs/<id>, and Search result says "
    "whether the ends were confident), and the SLO headroom (how many times tighter every deadline could "
    "have been with the trial still passing: above 1 it passed with room to spare, below 1 it failed). "
    "Good: passes up to the capacity, then failures close above it (a tight bracket).",
    COUNT,
    [
        Query(latest(names.CAPACITY_TRIAL_LOAD), instant=True, format="table"),
        Query(latest(names.CAPACITY_TRIAL_PASSED), instant=True, format="table"),
        Query(latest(names.CAPACITY_TRIAL_HEADROOM), instant=True, format="table"),
    ],
    transformations=table_of(
        {"Value #A": "load", "Value #B": "point verdict", "Value #C": "SLO headroom"}, "trial"
    ),
    overrides=[
        by_name(
            "point verdict",
            {"id": "mappings", "value": PASSED_TEXT},
            {"id": "custom.cellOptions", "value": {"type": "color-text"}},
        ),
        by_name(
            "SLO headroom",
            {"id": "unit", "value": FACTOR},
            {"id": "decimals", "value": 2},
            {"id": "thresholds", "value": {"mode": "absolute", "steps": HEADROOM_STEPS}},
            {"id": "custom.cellOptions", "value": {"type": "color-text"}},
        ),
    ],
    sort_by="trial",
)
headroom = bar_gauge(
    "SLO headroom per trial",
    "The SLO headroom of each trial of the latest search (see the table): green bars passed, red ones "
    "failed; the capacity lies between the last green and the first red load. Good: headroom falling "
    "smoothly with load, crossing 1 once.",
    FACTOR,
    [Query(latest(names.CAPACITY_TRIAL_HEADROOM), "{{module}} trial {{trial}}", instant=True)],
    HEADROOM_STEPS,
    low=0,
)

profile_history = timeseries(
    "Predicted prefill time by prompt length",
    "Prefill time Dp(P) the target's stored prefill profile predicts at reference prompt lengths "
    "(without the scheduling slack), held until the next profile. Good: flat across deployments; a step "
    "up means slower prefills, and every TTFT deadline derived from the profile loosens with it.",
    SECONDS,
    [Query(latest(names.PREFILL_PROFILE_PREDICTED, ENGINE), "{{target}} {{prompt_tokens}} tokens")],
    step=True,
)
profile_table = table(
    "Stored prefill profile",
    "The prefill time the stored profile predicts per prompt length, now: the TTFT deadline (plus the "
    "SLO's scheduling slack) a request of that length is held to. Good: grows smoothly with length.",
    SECONDS,
    [Query(latest(names.PREFILL_PROFILE_PREDICTED, ENGINE), instant=True, format="table")],
    transformations=table_of({"Value": "predicted prefill"}, "prompt_tokens"),
    overrides=[by_name("prompt_tokens", {"id": "unit", "value": COUNT})],
    sort_by="prompt_tokens",
)
profile_age = stat(
    "Prefill profile measured",
    "When the target's stored prefill profile was measured. Good: after the latest change of model, "
    "hardware or engine settings.",
    FROM_NOW,
    [Query(f"{latest(names.PREFILL_PROFILE_TIMESTAMP, ENGINE)} * 1000", "{{target}}")],
    sparkline=False,
)

jobs_running = timeseries(
    "Jobs running",
    "Capacity searches and prefill profiles running against each target (the target's scheduled probes "
    "pause meanwhile). Good: only during planned runs.",
    COUNT,
    [Query(f"{names.JOB_RUNNING.name}{ENGINE}", "{{target}} {{kind}}")],
    step=True,
)
jobs_finished = bar_gauge(
    "Jobs finished in the time range",
    "Jobs of every target finished within the selected time range, by kind and how they ended "
    "(succeeded, failed, cancelled, interrupted). Good: only succeeded.",
    COUNT,
    [
        Query(
            f"round(sum by (kind, state) (increase({names.JOBS_FINISHED.name}[$__range]))) > 0",
            "{{kind}} {{state}}",
            instant=True,
        )
    ],
    steps("blue"),
    low=0,
)

dashboard = new_dashboard(
    "Fluidity / Capacity",
    "fluidity-capacity",
    "Capacity searches (the highest load at which the fluidity SLO holds) and prefill profiles over "
    "time, and the trials of the latest search (Fluidity Exporter).",
    variables(module_source=names.CAPACITY_FOUND),
    [
        Section(
            "Latest capacity search",
            [
                Cell(capacity_rate, 4, 5),
                Cell(capacity_concurrency, 4, 5),
                Cell(fluid_rate, 4, 5),
                Cell(goodput_ratio, 3, 5),
                Cell(goodput_rate, 3, 5),
                Cell(found, 3, 5),
                Cell(last_search, 3, 5),
            ],
        ),
        Section("Measured bracket and predicted capacity", [Cell(bounds, 12, 6), Cell(predicted, 12, 6)]),
        Section(
            "What the capacity costs",
            [
                Cell(goodput_tokens, 6, 6),
                Cell(per_gpu, 6, 6),
                Cell(token_cost, 6, 6),
                Cell(live_per_gpu, 6, 6),
            ],
        ),
        Section(
            "Capacity over time",
            [Cell(capacity_history, 8), Cell(fluid_rate_history, 8), Cell(goodput_history, 8)],
        ),
        Section("Trials of the latest search", [Cell(trials, 14, 9), Cell(headroom, 10, 9)]),
        Section(
            "Prefill profile",
            [Cell(profile_history, 12, 9), Cell(profile_table, 8, 9), Cell(profile_age, 4, 9)],
        ),
        Section("Jobs", [Cell(jobs_running, 12, 6), Cell(jobs_finished, 12, 6)]),
    ],
)
