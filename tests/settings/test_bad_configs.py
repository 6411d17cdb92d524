"""Bad configs as a table of small YAML files, each with the exact problems it must report.

Every case is parsed with a fixed environment (``KEY`` holds a secret that must never be printed), so
the messages do not depend on the machine's variables.
"""

from __future__ import annotations

import pytest

from exporter.load.config_workloads import CONFIG_CHECKS
from exporter.settings import SettingsError, parse_config
from exporter.settings.target import LITERAL_SECRET

ENVIRON = {"KEY": "sk-never-print-me"}
T = "targets:\n  - name: a\n    url: http://h:8000\n"  # a valid target to hang a case on
# A target with two modules and a job schedule to hang a jobs case on (its params come after).
J = (
    T
    + "    modules: [m, n]\nmodules: {m: {}, n: {}, o: {}}\njobs:\n  schedules:\n    - {name: s, kind: capacity, cron: '0 3 * * *', params: "
)

CASES: dict[str, tuple[str, list[str]]] = {
    "traffic-without-address": ("traffic: {models: [m]}\n", ["traffic.ext_proc_address: missing (required)"]),
    "traffic-bad-values": (
        "traffic: {ext_proc_address: '9469', slo: strictest, models: [m, m], max_streams: 0, port: 1}\n",
        [
            'traffic: unknown key "port"; valid: ext_proc_address, max_streams, models, slo',
            'traffic.ext_proc_address: must be HOST:PORT (e.g. 0.0.0.0:9468, :9468 or [::]:9468), got "9469"',
            'traffic.slo: unknown value "strictest"; valid: default',
            'traffic.models[1]: duplicate model "m"',
            "traffic.max_streams: must be an integer in [1, 100000], got 0",
        ],
    ),
    "unknown-top-key": (
        "targetz: []\n" + T,
        ['(top level): unknown key "targetz"; valid: global, jobs, modules, slos, targets, traffic'],
    ),
    "unknown-global-key": (
        "global:\n  listen: ':9468'\n" + T,
        [
            'global: unknown key "listen"; valid: buckets, jobs_listen_address, listen_address, max_results_per_window, probe_token, state_dir, windows'
        ],
    ),
    "unknown-target-key": (
        "targets:\n  - name: a\n    url: http://h:8000\n    urll: http://x\n",
        [
            'targets[0]: unknown key "urll"; valid: api, api_key, budget, calibrate_prompts, engine_metrics, extra_body, gateway_metrics, gpu_hour_price, gpus, headers, model, modules, name, simulated, slo, timeouts, tls, url'
        ],
    ),
    # A "1d" window of a module probed every 30 s, 4 requests a run, with the default 2000 results: it
    # covered the last 42 minutes while its gauges said a day.
    "window-longer-than-its-results": (
        "global: {windows: [5m, 1d]}\n"
        + T
        + "    modules: [m]\nmodules: {m: {requests_per_run: 4, schedule: {interval: 30s}}}\n",
        [
            "global.max_results_per_window: 2000 results hold less than the 86400 s window of modules.m "
            "(about 11520: 4 every 30 s); raise it to at least 11520, or shorten global.windows"
        ],
    ),
    "unknown-timeouts-key": (
        T + "    timeouts: {ttft: 1s, read: 2s}\n",
        ['targets[0].timeouts: unknown key "read"; valid: connect, idle, total, ttft'],
    ),
    "unknown-engine-metrics-key": (
        T + "    engine_metrics: {url: http://h:8000/metrics, every: 5s}\n",
        ['targets[0].engine_metrics: unknown key "every"; valid: bearer_token, interval, kind, model, url'],
    ),
    "unknown-budget-key": (
        T + "    budget: {max_rps: 3}\n",
        [
            'targets[0].budget: unknown key "max_rps"; valid: backoff_after_failures, max_backoff, max_requests_per_hour, max_tokens_per_hour'
        ],
    ),
    "unknown-module-key": (
        T + "modules:\n  m:\n    requests: 3\n",
        [
            'modules.m: unknown key "requests"; valid: arrival, concurrency, max_output_tokens, max_prompt_tokens, requests_per_run, schedule, workload'
        ],
    ),
    "unknown-schedule-key": (
        T + "modules:\n  m:\n    schedule: {every: 5m}\n",
        ['modules.m.schedule: unknown key "every"; valid: cron, interval, jitter'],
    ),
    "unknown-slo-key": (
        T + "slos:\n  s:\n    deadline: 1s\n",
        [
            'slos.s: unknown key "deadline"; valid: decode_tiers, goodput, objectives, percentile, prefill, target_fluidity'
        ],
    ),
    "unknown-prefill-and-goodput-key": (
        T + "slos:\n  s:\n    prefill: {dp: 1s}\n    goodput: {tbt: 1s}\n",
        [
            'slos.s.prefill: unknown key "dp"; valid: deadline, model_file, scheduling_slack',
            'slos.s.goodput: unknown key "tbt"; valid: e2e, max_tbt, min_fluidity, normalized_latency, tpot, ttft',
        ],
    ),
    "unknown-bucket-name": (
        T + "global:\n  buckets: {itl: [0.1]}\n",
        [
            'global.buckets: unknown key "itl"; valid: e2e, fluidity, normalized_latency, preset, tbt, tpot, ttft'
        ],
    ),
    "unknown-tls-key": (
        T + "    tls: {verify: true, ca: /x}\n",
        ['targets[0].tls: unknown key "ca"; valid: ca_file, verify'],
    ),
    "unknown-api-key-key": (
        T + "    api_key: {value: sk-live-123456}\n",
        [
            'targets[0].api_key: unknown key "value"; valid: env, file',
            "targets[0].api_key: give exactly one of env (a variable name) or file (a path)",
        ],
    ),
    "unknown-workload-key": (
        T + "modules:\n  m:\n    workload: {prompt: 100, output_tokens: 10}\n",
        [
            'modules.m.workload: unknown key "prompt"; valid: format, output_tokens, preset, prompt_tokens, '
            "response_format, think_time, tool_calls, trace, turns"
        ],
    ),
    "bad-session-workload": (
        T + "modules:\n  m:\n    workload: {preset: lmsys, turns: zero, think_time: 'gamma:k=2', "
        "response_format: json}\n",
        [
            'modules.m.workload.turns: unknown length distribution "zero"; valid: empirical, fixed, lognormal, '
            "normal, uniform, zipf",
            'modules.m.workload.think_time: unknown think-time distribution "gamma"; valid: fixed, uniform, '
            "exponential, lognormal",
            'modules.m.workload.response_format: must be a response_format object with a "type", e.g. '
            '{type: json_schema, json_schema: {...}}, got "json"',
        ],
    ),
    # Not JSON data: a YAML date or NaN, and a number among names (sorting the keys raised a TypeError).
    "response-format-not-json": (
        T
        + "modules:\n  m:\n    workload: {preset: lmsys, response_format: {type: json_schema, x: 2020-01-01}}\n"
        "  n:\n    workload: {preset: lmsys, response_format: {type: json_schema, x: .nan}}\n"
        "  o:\n    workload: {preset: lmsys, response_format: {type: json_schema, 1: x}}\n",
        [
            "modules.m.workload.response_format: must be JSON data: Object of type date is not JSON serializable",
            "modules.n.workload.response_format: must be JSON data: Out of range float values are not JSON compliant",
        ],
    ),
    "tool-calls-in-conversations": (
        T + "modules:\n  m:\n    workload: {preset: lmsys, turns: 3, tool_calls: true}\n",
        [
            "modules.m.workload: tool_calls and turns above 1 exclude each other (a conversation would need "
            "tool results)"
        ],
    ),
    "preset-and-lengths": (
        T + "modules:\n  m:\n    workload: {preset: lmsys, prompt_tokens: 100}\n",
        ["modules.m.workload: give one of preset, trace (with format) or prompt_tokens/output_tokens"],
    ),
    "timeout-above-total": (
        T + "    timeouts: {ttft: 2m, total: 1m}\n",
        ["targets[0].timeouts.ttft: must not exceed total (60 s), got 120 s"],
    ),
    "missing-ca-file": (
        T + "    tls: {ca_file: /nonexistent/ca.pem}\n",
        ["targets[0].tls.ca_file: file not found: /nonexistent/ca.pem"],
    ),
    "wrong-type-integer": (
        T + "modules:\n  m:\n    requests_per_run: four\n",
        ['modules.m.requests_per_run: must be an integer in [1, 10000], got "four"'],
    ),
    "wrong-type-list": (
        "global:\n  windows: 5m\n" + T,
        ['global.windows: must be a list, got "5m"'],
    ),
    "wrong-type-targets": (
        "targets: {a: 1}\n",
        ["targets: must be a list, got a mapping"],
    ),
    "wrong-type-bool": (
        T + "    tls: {verify: 'yes'}\n",
        ['targets[0].tls.verify: must be true or false, got "yes"'],
    ),
    "wrong-type-section": (
        T + "    timeouts: 30s\n",
        ['targets[0].timeouts: must be a mapping, got "30s"'],
    ),
    "bad-duration-unit": (
        T + "modules:\n  m:\n    schedule: {interval: 5x}\n",
        [
            'modules.m.schedule.interval: bad duration "5x"; use seconds (a number) or a number with a unit: ms, s, m, h, d (e.g. 250ms, 30s, 5m, 1h)'
        ],
    ),
    "bad-duration-negative": (
        T + "    timeouts: {ttft: -1}\n",
        ["targets[0].timeouts.ttft: must be a duration > 0, got -1"],  # not ">= 0": a 0 is refused too
    ),
    "bad-duration-zero-window": (
        "global:\n  windows: [0s, 1h, 1h]\n" + T,
        ['global.windows[0]: must be a duration > 0, got "0s"', 'global.windows[2]: duplicate window "1h"'],
    ),
    "duplicate-target-names": (
        T + "  - name: a\n    url: http://h:8001\n",
        ['targets[1].name: duplicate target name "a" (also targets[0])'],
    ),
    "unknown-module-reference": (
        T + "    modules: [chat-short, chatt]\nmodules:\n  chat-short: {}\n  code: {}\n",
        ['targets[0].modules[1]: unknown module "chatt"; valid: chat-short, code'],
    ),
    "unknown-slo-reference": (
        T + "    slo: strictt\nslos:\n  strict: {}\n",
        ['targets[0].slo: unknown slo "strictt"; valid: default, strict'],
    ),
    "label-unsafe-names": (
        "targets:\n  - name: my target\n    url: http://h:8000\nmodules:\n  chat short: {}\nslos:\n  'a/b': {}\n",
        [
            'targets[0].name: bad name "my target"; use only letters, digits, _ . - (it becomes a label value)',
            'modules.chat short: bad name "chat short"; use only letters, digits, _ . - (it becomes a label value)',
            'slos.a/b: bad name "a/b"; use only letters, digits, _ . - (it becomes a label value)',
        ],
    ),
    "literal-api-key": (
        T + "    api_key: sk-live-123456\n",
        [
            "targets[0].api_key: a literal key is not accepted (it would sit in the config file, its backups and diffs); write {env: NAME} or {file: PATH}"
        ],
    ),
    "literal-api-key-from-env": (
        T + "    api_key: ${KEY}\n",
        [
            "targets[0].api_key: a literal key is not accepted (it would sit in the config file, its backups and diffs); write {env: NAME} or {file: PATH} (${NAME} expands to a literal too)"
        ],
    ),
    "missing-env-secret": (
        T + "    api_key: {env: NO_SUCH_KEY_VAR}\n",
        [
            "targets[0].api_key.env: environment variable NO_SUCH_KEY_VAR is not set or empty (it should hold the API key)"
        ],
    ),
    "missing-secret-file": (
        T + "    api_key: {file: /nonexistent/key}\n",
        ["targets[0].api_key.file: cannot read the secret file /nonexistent/key: No such file or directory"],
    ),
    "secret-both-env-and-file": (
        T + "    api_key: {env: A, file: B}\n",
        ["targets[0].api_key: give exactly one of env (a variable name) or file (a path)"],
    ),
    "missing-env-expansion": (
        "targets:\n  - name: a\n    url: ${NO_SUCH_URL_VAR}\n",
        [
            "targets[0].url: environment variable NO_SUCH_URL_VAR is not set (write ${NO_SUCH_URL_VAR:-default} to give a default)"
        ],
    ),
    "bad-cron": (
        T + "modules:\n  m:\n    schedule: {cron: '*/5 * * *'}\n",
        [
            'modules.m.schedule.cron: bad cron expression "*/5 * * *": Wrong number of fields; got 4, expected 5'
        ],
    ),
    "bad-cron-value": (
        T + "modules:\n  m:\n    schedule: {cron: '61 * * * *'}\n",
        [
            "modules.m.schedule.cron: bad cron expression \"61 * * * *\": Error validating expression '61': the last value (61) is higher than the maximum value (59)"
        ],
    ),
    "cron-and-interval": (
        T + "modules:\n  m:\n    schedule: {cron: '* * * * *', interval: 30s}\n",
        ["modules.m.schedule: give either interval or cron, not both"],
    ),
    "jitter-not-below-interval": (
        T + "modules:\n  m:\n    schedule: {interval: 30s, jitter: 30s}\n",
        ["modules.m.schedule.jitter: must be less than the interval (30 s), got 30 s"],
    ),
    "arrival-and-concurrency": (
        T + "modules:\n  m:\n    arrival: poisson:rate=2\n    concurrency: 2\n",
        ["modules.m: give either arrival (open loop) or concurrency (closed loop), not both"],
    ),
    "unknown-arrival": (
        T + "modules:\n  chat-short:\n    arrival: burst:rate=2\n",
        ['modules.chat-short.arrival: unknown arrival process "burst"; valid: constant, gamma, poisson'],
    ),
    "bad-arrival-rate": (
        T + "modules:\n  m:\n    arrival: {kind: poisson, rate: 0}\n",
        ['modules.m.arrival: poisson: field "rate" must be a number > 0 (requests per second), got 0.0'],
    ),
    "buckets-unsorted": (
        T + "global:\n  buckets: {ttft: [0.1, 1, 0.5]}\n",
        ["global.buckets.ttft[2]: buckets must be strictly ascending, got 0.5 after 1"],
    ),
    "buckets-negative-and-inf": (
        T + "global:\n  buckets: {tbt: [-0.01, 0.1, .inf]}\n",
        [
            "global.buckets.tbt[0]: a bucket bound must be a number finite and >= 0 (+Inf is always added), got -0.01",
            "global.buckets.tbt[2]: a bucket bound must be a number finite and >= 0 (+Inf is always added), got inf",
        ],
    ),
    "buckets-fluidity-above-one": (
        T + "global:\n  buckets: {fluidity: [0.9, 1.5]}\n",
        ["global.buckets.fluidity[1]: a bucket bound must be a number in [0, 1], got 1.5"],
    ),
    "bad-length-spec": (
        T + "modules:\n  m:\n    workload: {prompt_tokens: 'lognorm:median=5', output_tokens: 'fixed:-3'}\n",
        [
            'modules.m.workload.prompt_tokens: unknown length distribution "lognorm"; valid: empirical, fixed, lognormal, normal, uniform, zipf',
            'modules.m.workload.output_tokens: fixed: field "value" must be an integer >= 0, got -3',
        ],
    ),
    # A draw past int64: numpy raised inside the length check's own error path (a traceback).
    "lengths-past-int64": (
        T + "modules:\n  m:\n    workload: {prompt_tokens: 'uniform:low=0,high=1e30', output_tokens: 8}\n",
        [
            "modules.m: workload m: every prompt length drawn is above the ceiling of 1048576 tokens a request "
            "may have (e.g. 24666216691666)",
        ],
    ),
    "unknown-preset": (
        T + "modules:\n  m:\n    workload: sharegtp\n",
        [
            'modules.m.workload: unknown workload preset "sharegtp"; valid: sharegpt, lmsys, mooncake, azure-code, arxiv-summarization, bwb'
        ],
    ),
    # A list is unhashable: the preset check raised a TypeError (found by fuzzing the config).
    "preset-not-a-name": (
        T + "modules:\n  m:\n    workload: {preset: []}\n",
        [
            "modules.m.workload.preset: must be a workload preset's name, got a list; valid: sharegpt, lmsys, mooncake, azure-code, arxiv-summarization, bwb"
        ],
    ),
    "filters-reject-everything": (
        T
        + "modules:\n  m:\n    workload: {prompt_tokens: 'fixed:1000', output_tokens: 10}\n    max_prompt_tokens: 10\n",
        ["modules.m: workload m: only 0 of 10048 draws pass the filter max_prompt_tokens=10; loosen it"],
    ),
    "bad-url-scheme": (
        "targets:\n  - name: a\n    url: ftp://h:8000\n",
        ['targets[0].url: must be an http(s) URL like http://host:8000, got "ftp://h:8000"'],
    ),
    "bad-url-no-host": (
        "targets:\n  - name: a\n    url: http://\n",
        ['targets[0].url: must be an http(s) URL like http://host:8000, got "http://"'],
    ),
    "bad-url-port": (
        "targets:\n  - name: a\n    url: http://h:99999\n",
        ['targets[0].url: bad port in "http://h:99999": a port is a number from 0 to 65535'],
    ),
    "url-with-credentials": (
        "targets:\n  - name: a\n    url: http://user:hunter2@h:8000\n",
        ["targets[0].url: must not hold credentials (user:password@); use api_key or headers"],
    ),
    "missing-name-and-url": (
        "targets:\n  - api: chat\n",
        ["targets[0].name: missing (required)", "targets[0].url: missing (required)"],
    ),
    "unknown-api-and-engine-kind": (
        T + "    api: embeddings\n    engine_metrics: {url: http://h:8000/metrics, kind: ollama}\n",
        [
            'targets[0].api: unknown value "embeddings"; valid: chat, completions, responses',
            'targets[0].engine_metrics.kind: unknown value "ollama"; valid: auto, llamacpp, sglang, tgi, vllm',
        ],
    ),
    "gateway-kind-is-no-engine-kind": (
        T + "    gateway_metrics: {url: http://epp:9090/metrics, kind: vllm}\n",
        ['targets[0].gateway_metrics.kind: unknown value "vllm"; valid: auto, llm-d-epp'],
    ),
    "gateway-metrics-without-url-and-unknown-key": (
        T + "    gateway_metrics: {kind: llm-d-epp, every: 5s}\n",
        [
            'targets[0].gateway_metrics: unknown key "every"; valid: bearer_token, interval, kind, model, url',
            "targets[0].gateway_metrics.url: missing (required)",
        ],
    ),
    "gateway-bearer-token-literal": (
        T + "    gateway_metrics: {url: http://epp:9090/metrics, bearer_token: eyJhbGci}\n",
        ["targets[0].gateway_metrics.bearer_token: " + LITERAL_SECRET],
    ),
    "unknown-bucket-preset": (
        T + "global:\n  buckets: {preset: otel, tbt: [0.01, 0.1]}\n",
        ['global.buckets.preset: unknown value "otel"; valid: default, opentelemetry'],
    ),
    "headers-and-extra-body": (
        T + "    headers: {X-Id: 5, 'bad header': x, X-A: \"a\\nb\"}\n    extra_body: [1]\n",
        [
            "targets[0].headers.X-Id: must be a string (quote it), {env: NAME} or {file: PATH}, got 5",
            "targets[0].headers.bad header: not a valid HTTP header name",
            # It was sent as it was: the target answered 400 to every request, and nothing said why.
            "targets[0].headers.X-A: the value must not hold a line break or NUL",
            "targets[0].extra_body: must be a mapping (merged into every request body), got a list",
        ],
    ),
    "bad-listen-address": (
        "global:\n  listen_address: localhost\n" + T,
        ['global.listen_address: must be HOST:PORT (e.g. 0.0.0.0:9468, :9468 or [::]:9468), got "localhost"'],
    ),
    "listen-port-out-of-range": (
        "global:\n  listen_address: 127.0.0.1:99999\n" + T,
        ['global.listen_address: port 99999 is out of range (0 to 65535), got "127.0.0.1:99999"'],
    ),
    "jobs-listen-address-malformed": (
        "global:\n  jobs_listen_address: 'localhost'\n" + T,
        [
            'global.jobs_listen_address: must be HOST:PORT (e.g. 0.0.0.0:9468, :9468 or [::]:9468), got "localhost"'
        ],
    ),
    "bad-objectives": (
        T + "slos:\n  s:\n    objectives: ['ttft:p99<2', 'itl:p99<=1']\n",
        [
            'slos.s.objectives[0]: SLO "ttft:p99<2" needs a bound written pNN<=threshold or pNN>=threshold',
            'slos.s.objectives[1]: unknown SLO metric "itl"; valid: e2e, fluidity, normalized_latency, tbt, tpot, ttft',
        ],
    ),
    "prefill-deadline-and-model": (
        T + "slos:\n  s:\n    prefill: {deadline: 1s, model_file: /nonexistent.json}\n",
        [
            "slos.s.prefill: give either deadline (a constant Dp) or model_file, not both",
            "slos.s.prefill.model_file: cannot read the prefill model file /nonexistent.json: No such file or directory",
        ],
    ),
    "slo-numbers-out-of-range": (
        T + "slos:\n  s:\n    target_fluidity: 1.5\n    percentile: 0\n    decode_tiers: {fast: 0}\n",
        [
            "slos.s.decode_tiers.fast: must be a duration > 0, got 0",
            "slos.s.target_fluidity: must be a number in (0, 1], got 1.5",
            "slos.s.percentile: must be a number in (0, 100], got 0",
        ],
    ),
    "duplicate-yaml-key": (
        "targets:\n  - name: a\n    url: http://h:8000\n    name: b\n",
        ['yaml: line 4, column 5: duplicate key "name"'],
    ),
    "yaml-syntax-error": (
        "targets: [\n",
        [
            "yaml: line 2, column 1: expected the node content, but found '<stream end>' (while parsing a flow node)"
        ],
    ),
    "empty-file": (
        "",
        ["(top level): the config is empty; it needs at least one target under targets"],
    ),
    "not-a-mapping": (
        "- a\n",
        ["(top level): must be a mapping, got a list"],
    ),
    "no-targets": (
        "targets: []\n",
        ["targets: must list at least one target"],
    ),
    "bad-env-reference": (
        "targets:\n  - name: a\n    url: http://h:${PORT\n",
        ['targets[0].url: bad variable reference "${PORT"; write ${NAME} or ${NAME:-default}'],
    ),
    "unknown-jobs-key": (
        T + "jobs: {token: {env: KEY}, limits: {max_rps: 3}}\n",
        [
            'jobs: unknown key "token"; valid: api_token, history, limits, schedules, shards, workers',
            'jobs.limits: unknown key "max_rps"; valid: max_concurrency, max_duration, max_prompt_tokens, max_rate, max_requests_per_trial, max_tokens, max_trials',
        ],
    ),
    "literal-jobs-token": (
        T + "jobs: {api_token: hunter2}\n",
        ["jobs.api_token: " + LITERAL_SECRET],
    ),
    "missing-jobs-token-variable": (
        T + "jobs: {api_token: {env: NO_SUCH_TOKEN_VAR}}\n",
        [
            "jobs.api_token.env: environment variable NO_SUCH_TOKEN_VAR is not set or empty (it should hold the jobs API bearer token)"
        ],
    ),
    "bad-jobs-limits-and-history": (
        T
        + "jobs:\n  limits: {max_rate: 0, max_concurrency: 0, max_duration: 0s, max_requests_per_trial: 5}\n  history: 0\n",
        [
            "jobs.limits.max_rate: must be a number in (0, 10000], got 0",
            "jobs.limits.max_concurrency: must be an integer in [1, 10000], got 0",
            'jobs.limits.max_duration: must be a duration > 0, got "0s"',
            "jobs.limits.max_requests_per_trial: must be an integer in [10, 1000000], got 5",
            "jobs.history: must be an integer in [1, 100000], got 0",
        ],
    ),
    "job-schedule-missing-everything": (
        T + "jobs:\n  schedules: [{}, cron]\n",
        [
            "jobs.schedules[0].name: missing (required)",
            "jobs.schedules[0].kind: missing (required)",
            "jobs.schedules[0].cron: missing (required)",
            "jobs.schedules[0].params: missing (required)",
            'jobs.schedules[1]: must be a mapping, got "cron"',
        ],
    ),
    "job-schedule-bad-fields": (
        T
        + "jobs:\n  schedules:\n    - {name: 'a b', kind: profile, cron: '0 3 * *', params: {target: a}, every: 1h}\n",
        [
            'jobs.schedules[0]: unknown key "every"; valid: cron, kind, name, params',
            'jobs.schedules[0].name: bad name "a b"; use only letters, digits, _ . - (it becomes a label value)',
            'jobs.schedules[0].kind: unknown value "profile"; valid: capacity, prefill-profile',
            'jobs.schedules[0].cron: bad cron expression "0 3 * *": Wrong number of fields; got 4, expected 5',
        ],
    ),
    "bad-jobs-workers": (
        T + "jobs: {workers: many}\n",
        ['jobs.workers: must be an integer >= 1 or auto (the CPUs this container may use), got "many"'],
    ),
    "zero-jobs-workers": (
        T + "jobs: {workers: 0}\n",
        ["jobs.workers: must be an integer >= 1 or auto (the CPUs this container may use), got 0"],
    ),
    "job-schedule-workers-above-jobs-workers": (
        J + "{target: a, workers: 3}}\n  workers: 2\n",
        [
            "jobs.schedules[0].params.workers: 3 exceeds jobs.workers (2), the most client processes a job "
            "may use (bounded by the CPUs the exporter's container may use)"
        ],
    ),
    "jobs-shards-problems": (
        T + "jobs:\n  shards: {listen: 9469, start_delay: soon, replicas: 4}\n",
        [
            'jobs.shards: unknown key "replicas"; valid: count, heartbeat_timeout, listen, max_start_lateness, ready_timeout, start_delay, target_urls, token',
            "jobs.shards: needs jobs.shards.token (or jobs.api_token): the shards present it to the daemon",
            "jobs.shards.count: missing (required)",
            'jobs.shards.start_delay: bad duration "soon"; use seconds (a number) or a number with a unit: ms, s, m, h, d (e.g. 250ms, 30s, 5m, 1h)',
            "jobs.shards.listen: must be a non-empty string, got 9469",
        ],
    ),
    "jobs-shards-target-urls": (
        T
        + "jobs:\n  api_token: {env: KEY}\n  shards: {count: 2, target_urls: {b: 'http://vllm:8000', a: 'http://vllm:8000/v1'}}\n",
        [
            'jobs.shards.target_urls: unknown key "b"; valid: a',
        ],
    ),
    "job-schedule-duplicate-names": (
        J + "{target: a}}\n    - {name: s, kind: prefill-profile, cron: '0 2 * * 0', params: {target: a}}\n",
        ['jobs.schedules[1].name: duplicate schedule name "s" (also jobs.schedules[0])'],
    ),
    "job-schedule-unknown-target-and-module": (
        J
        + "{target: b}}\n    - {name: t, kind: capacity, cron: '0 3 * * *', params: {target: a, module: o}}\n",
        [
            'jobs.schedules[0].params.target: unknown target "b"; valid: a',
            'jobs.schedules[1].params.module: module "o" is not one of target "a"\'s modules; valid: m, n',
        ],
    ),
    "job-schedule-params-problems": (
        J + "{target: a, max_load: 50, slo: {decode_tier: fast}, speed: 1}}\n",
        [
            'jobs.schedules[0].params: unknown key "speed"; valid: arrival, confidence, early_stop, load, max_load, max_trials, min_load, module, requests_per_trial, seed, slo, start, target, time_budget_s, tolerance, trial_duration_s, warmup_requests, workers',
            "jobs.schedules[0].params.max_load: 50 exceeds jobs.limits.max_rate (20)",
            'jobs.schedules[0].params.slo.decode_tier: unknown decode tier "fast"; valid: strict, medium, relaxed (or give decode_deadline_s)',
        ],
    ),
    # A YAML set quoted in the message once read as a placeholder ({'a'}): a KeyError, a traceback.
    "job-schedule-decode-tier-a-set": (
        J + "{target: a, slo: {decode_tier: !!set {a}}}}\n",
        [
            "jobs.schedules[0].params.slo.decode_tier: must be a tier, got a set; valid: strict, medium, relaxed (or give decode_deadline_s)"
        ],
    ),
    "job-schedule-params-against-configured-limits": (
        T
        + "jobs:\n  limits: {max_prompt_tokens: 4096}\n  schedules:\n    - {name: p, kind: prefill-profile, cron: '0 2 * * 0', params: {target: a, lengths: [512, 8192]}}\n",
        ["jobs.schedules[0].params.lengths[1]: 8192 exceeds jobs.limits.max_prompt_tokens (4096)"],
    ),
    "job-schedule-params-not-a-mapping": (
        J + "a}\n",
        ['jobs.schedules[0].params: must be a mapping, got "a"'],
    ),
    # Values check-config accepted once and run could not start, serve or reload.
    "interval-beyond-its-bound": (
        T + "modules:\n  m:\n    schedule: {interval: 99999999999h, jitter: 8d}\n",
        [
            'modules.m.schedule.interval: must be a duration of at most 7d, got "99999999999h"',
            'modules.m.schedule.jitter: must be a duration of at most 7d, got "8d"',
        ],
    ),
    "requests-per-run-beyond-its-bound": (
        T + "modules:\n  m:\n    requests_per_run: 1000000000000000000000000000000\n    concurrency: 1001\n",
        [
            "modules.m.requests_per_run: must be an integer in [1, 10000], got 1000000000000000000000000000000",
            "modules.m.concurrency: must be an integer in [1, 1000], got 1001",
        ],
    ),
    "prompt-beyond-the-ceiling": (
        T + "modules:\n  m:\n    workload: {prompt_tokens: 1000000000000, output_tokens: 8}\n",
        [
            "modules.m: workload m: every prompt length drawn is above the ceiling of 1048576 tokens a "
            "request may have (e.g. 1000000000000)"
        ],
    ),
    "length-filter-beyond-the-ceiling": (
        T + "modules:\n  m:\n    max_prompt_tokens: 2000000\n",
        ["modules.m.max_prompt_tokens: must be an integer in [1, 1048576], got 2000000"],
    ),
    "durations-and-counts-beyond-their-bounds": (
        "global: {windows: [40d], max_results_per_window: 2000000}\n"
        + T
        + "    timeouts: {total: 2d}\n    budget: {max_backoff: 2d, max_requests_per_hour: 20000000}\n"
        + "    engine_metrics: {url: 'http://h:8000/metrics', interval: 2h}\n",
        [
            'global.windows[0]: must be a duration of at most 31d, got "40d"',
            "global.max_results_per_window: must be an integer in [1, 1000000], got 2000000",
            'targets[0].timeouts.total: must be a duration of at most 1d, got "2d"',
            'targets[0].engine_metrics.interval: must be a duration of at most 1h, got "2h"',
            "targets[0].budget.max_requests_per_hour: must be an integer in [1, 10000000], got 20000000",
            'targets[0].budget.max_backoff: must be a duration of at most 1d, got "2d"',
        ],
    ),
    "job-limits-beyond-their-bounds": (
        T + "jobs:\n  limits: {max_rate: 20000, max_trials: 1000, max_duration: 30d}\n",
        [
            "jobs.limits.max_rate: must be a number in (0, 10000], got 20000",
            'jobs.limits.max_duration: must be a duration of at most 7d, got "30d"',
            "jobs.limits.max_trials: must be an integer in [1, 100], got 1000",
        ],
    ),
    "run-larger-than-the-hourly-budget": (
        T
        + "    budget: {max_requests_per_hour: 5, max_tokens_per_hour: 100}\n"
        + "modules:\n  m:\n    requests_per_run: 10\n    workload: {prompt_tokens: 64, output_tokens: 8}\n",
        [
            "targets[0].budget.max_requests_per_hour: 5 is below modules.m.requests_per_run (10): that "
            "module could never run; raise the budget or lower requests_per_run",
            "targets[0].budget.max_tokens_per_hour: 100 is below the smallest run of modules.m (10 requests, "
            "at least 720 tokens): that module could never run",
        ],
    ),
    # A problem in one section hid the checks across sections: fixing it only revealed the next.
    "section-and-cross-section-problems-together": (
        "global: {windows: [5m, 1d]}\n"
        + T
        + "    gpus: 0\n    budget: {max_requests_per_hour: 5}\n    modules: [m, gone]\n"
        + "modules:\n  m: {requests_per_run: 10, schedule: {interval: 30s}}\n  bad: {requests_per_run: 0}\n",
        [
            "targets[0].gpus: must be a number > 0, got 0",
            'targets[0].modules[1]: unknown module "gone"; valid: m, bad',
            "modules.bad.requests_per_run: must be an integer in [1, 10000], got 0",
            "targets[0].budget.max_requests_per_hour: 5 is below modules.m.requests_per_run (10): that "
            "module could never run; raise the budget or lower requests_per_run",
            "global.max_results_per_window: 2000 results hold less than the 86400 s window of modules.m "
            "(about 28800: 10 every 30 s); raise it to at least 28800, or shorten global.windows",
        ],
    ),
    # ... but not over the defaults read in place of a bad value (2000 results here was never written).
    "no-cross-section-check-of-a-bad-value": (
        "global: {windows: [1d], max_results_per_window: 0}\n"
        + T
        + "    modules: [m]\nmodules: {m: {requests_per_run: 4, schedule: {interval: 30s}}}\n",
        ["global.max_results_per_window: must be an integer in [1, 1000000], got 0"],
    ),
    "bad-gpus": (
        T + "    gpus: 0\n    gpu_hour_price: -1\n",
        [
            "targets[0].gpus: must be a number > 0, got 0",
            "targets[0].gpu_hour_price: must be a number >= 0, got -1",
        ],
    ),
    # Once accepted, then every probe run failed with a traceback and /probe answered 500.
    "tool-calls-with-the-completions-api": (
        "targets:\n  - {name: comp, url: 'http://h:1', api: completions, modules: [tools]}\n"
        "modules:\n  tools:\n    workload: {prompt_tokens: 'fixed:64', output_tokens: 'fixed:16', tool_calls: true}\n",
        [
            'targets[0]: target "comp" cannot probe module "tools": tool calls need api chat or responses, '
            "not completions; change one of them"
        ],
    ),
    "tool-calls-with-the-completions-api-by-default-modules": (
        "targets:\n  - {name: comp, url: 'http://h:1', api: completions, budget: {max_tokens_per_hour: 1000}}\n"
        "modules:\n  plain: {}\n  tools:\n    workload: {preset: sharegpt, tool_calls: true}\n",
        [
            'targets[0]: target "comp" cannot probe module "tools": tool calls need api chat or responses, '
            "not completions; change one of them"
        ],
    ),
    "gpu-hour-price-without-gpus": (
        T + "    gpu_hour_price: 2.5\n",
        ["targets[0].gpu_hour_price: needs gpus: the price is per GPU-hour, so without it nothing is priced"],
    ),
    "duplicate-module-reference": (
        T + "    modules: [m, m]\nmodules:\n  m: {}\n",
        ['targets[0].modules[1]: module "m" is listed twice'],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_config_reports_exactly(name: str) -> None:
    text, expected = CASES[name]
    with pytest.raises(SettingsError) as caught:
        parse_config(text, environ=ENVIRON, checks=CONFIG_CHECKS)
    assert caught.value.problems == expected
    assert str(caught.value) == "\n".join(expected)


@pytest.mark.parametrize("name", list(CASES))
def test_bad_config_never_prints_secrets(name: str) -> None:
    text, _ = CASES[name]
    with pytest.raises(SettingsError) as caught:
        parse_config(text, environ=ENVIRON, checks=CONFIG_CHECKS)
    message = str(caught.value)
    assert "sk-never-print-me" not in message
    assert "sk-live-123456" not in message
    assert "hunter2" not in message


def test_probe_token_is_a_secret_reference_never_a_literal() -> None:
    with pytest.raises(SettingsError) as caught:
        parse_config("global: {probe_token: hunter2}\ntargets: [{name: a, url: 'http://127.0.0.1:1'}]\n")
    assert caught.value.problems == ["global.probe_token: " + LITERAL_SECRET]
    assert "hunter2" not in str(caught.value)
    config = parse_config(
        "global: {probe_token: {env: PROBE_TOKEN}}\ntargets: [{name: a, url: 'http://127.0.0.1:1'}]\n",
        environ={"PROBE_TOKEN": "s3cret-token"},
    )
    assert config.global_.probe_token is not None and config.global_.probe_token.reveal() == "s3cret-token"
    assert "s3cret-token" not in repr(config)
