"""The settings: every setting of the exporter as frozen dataclasses of plain values, read once for YAML
(the daemon's config), JSON (a jobs API request) and flags (the one-shot commands), every problem
reported at once under its path. The lowest layer beside ``exporter.stats`` (whose types some settings
produce, e.g. ``GoodputBounds``); it builds no run-time object (workloads are built in ``exporter.load``,
deadline policies in ``exporter.evaluation``).

The daemon's configuration: YAML -> frozen, validated ``Config``.

``load_config(path_or_text)`` returns a ``Config`` or raises one ``SettingsError`` whose ``problems`` list
holds every problem of the file as ``path: message`` (``targets[1].modules[0]: unknown module "chatt";
valid: chat-short, code``). Unknown keys are errors. ``default_config(sim_url)`` is the embedded default
(probe the built-in simulator). ``fluidity-exporter check-config FILE`` checks a file (exit 0, or 1 for a bad one).

Schema (every key is optional unless marked *required*; the values shown are the defaults)::

    global:
      listen_address: "0.0.0.0:9468"   # HOST:PORT; the --web.listen-address flag wins over it
      jobs_listen_address: null        # HOST:PORT: the jobs API and /-/reload there, not beside /metrics
                                       # (--web.jobs-listen-address wins); null: beside /metrics
      windows: [5m, 1h]                # rolling windows of the window gauges; at least one, > 0, distinct
      max_results_per_window: 2000     # results kept per (target, module): the memory bound
      state_dir: null                  # folder for prefill profiles and job history
      probe_token: null                # {env: NAME} or {file: PATH}: bearer token /probe requires; without
                                       # one, /probe only probes simulated targets
      buckets:                         # histogram bucket overrides (upper bounds; +Inf is added):
        preset: default                #   default | opentelemetry (GenAI semconv advice; the rest on top)
        ttft: [...]                    #   ttft, tbt, tpot, e2e, normalized_latency (seconds, >= 0) and
        fluidity: [...]                #   fluidity (in [0, 1]); strictly ascending, finite
    targets:                           # *required*, at least one
      - name: local-vllm               # *required*, unique, [A-Za-z0-9_.-]+ (a label value)
        url: http://127.0.0.1:8000     # *required*, http(s)://host[:port][/path]; a trailing /v1 is left out
        api: chat                      # chat | completions | responses
        model: null                    # null: the first model of /v1/models
        api_key: null                  # {env: NAME} or {file: PATH}; a literal string is refused
        headers: {}                    # header name -> string value, sent with every request
        extra_body: {}                 # merged into every request body (JSON data)
        timeouts: {connect: 10s, ttft: 60s, idle: 30s, total: 10m}   # null: no limit
        tls: {verify: true, ca_file: null}
        engine_metrics: null           # {url: *required*, kind: auto, interval: 15s, model: null,
                                       #  bearer_token: null ({env: NAME} or {file: PATH})};
                                       # kind: auto, llamacpp, sglang, tgi, vllm
        gateway_metrics: null          # the gateway in front of the target, the same keys; kind: auto,
                                       # llm-d-epp (its endpoint picker's /metrics); fluidity_gateway_*
        modules: [...]                 # module names; default: every module (an empty list: none)
        slo: default                   # a name under slos ("default" exists even when not written)
        budget: {max_requests_per_hour: null, max_tokens_per_hour: null,     # null: no limit
                 backoff_after_failures: 3, max_backoff: 10m}
        simulated: false               # the target is `fluidity-exporter sim`: exact prompt lengths
    modules:                           # name ([A-Za-z0-9_.-]+) -> module
      chat-short:
        workload: {prompt_tokens: "lognormal:median=512,sigma=0.5", output_tokens: 128}
                                       # or a preset name: sharegpt, lmsys, mooncake, azure-code,
                                       # arxiv-summarization, bwb (length specs: exporter.settings.lengths)
                                       # or {trace: PATH, format: azure|jsonl|mooncake|sharegpt}: a trace's
                                       # (prompt, output) pairs, read at load time
        max_prompt_tokens: null        # length filters (null: the preset's own, or none)
        max_output_tokens: null
        requests_per_run: 2
        concurrency: 1                 # closed loop; or arrival (open loop), never both:
        arrival: null                  # "poisson:rate=2", {kind: gamma, rate: 2, shape: 0.5}, constant
        schedule: {interval: 30s, jitter: 0s}   # or {cron: "*/5 * * * *", jitter: ...}; jitter < interval
    slos:                              # name -> SLO; "default" is built in (all defaults) unless defined
      default:
        prefill: {deadline: 1s}        # or {model_file: prefill.json, scheduling_slack: 250ms}; the
                                       # slack alone is added to a profile a job applies
        decode_tiers: {strict: 25ms, medium: 50ms, relaxed: 100ms}
        target_fluidity: 0.9           # in (0, 1]
        percentile: 99                 # in (0, 100]
        objectives: []                 # e.g. ["ttft:p99<=2", "fluidity:p99>=0.9"]
        goodput: null                  # {ttft, tpot, e2e, max_tbt, normalized_latency: durations,
                                       #  min_fluidity: 0-1}; a request is good if it meets them all
    traffic:                           # observe real user traffic through Envoy (exporter.traffic);
      ext_proc_address: *required*     #   HOST:PORT of the gRPC observer (envoy-config --observer);
      slo: default                     #   with it, targets may be left out (observe only). The SLO
      models: []                       #   judging users; the model label's values (others: "other");
      max_streams: 1024                #   streams observed at once, more pass unobserved (counted)
    jobs:                              # capacity searches and prefill profiles (exporter.jobs)
      api_token: null                  # {env: NAME} or {file: PATH}: bearer token of the jobs API; without
                                       # one the jobs API is disabled (scheduled jobs still run)
      limits:                          # ceilings no job may exceed; a request for more is refused (400)
        max_rate: 20                   #   requests/s of a rate search's trials
        max_concurrency: 64            #   requests in flight of a concurrency search's trials
        max_duration: 1h               #   wall time of one job
        max_tokens: 5000000            #   prompt + output tokens one job may spend
        max_trials: 12
        max_requests_per_trial: 2000   #   measured + warm-up requests of one trial (>= 10)
        max_prompt_tokens: 32768       #   longest prompt a prefill profile sends
      history: 200                     # finished jobs kept in state_dir/jobs
      schedules: []                    # jobs started on a cron line, e.g.
                                       # - name: nightly-capacity    # *required*, unique, a label value
                                       #   kind: capacity            # *required*: capacity | prefill-profile
                                       #   cron: "0 3 * * *"         # *required*, as modules' schedule.cron
                                       #   params: {target: local-vllm, module: chat-short,
                                       #            slo: {decode_tier: medium}}
                                       # params: as the jobs API takes them (exporter.settings.job_params);
                                       # target must be configured, module one of the target's modules

Durations are numbers of seconds or strings such as ``250ms``, ``30s``, ``5m``, ``1h``, ``1h30m``.
String values may use ``${NAME}`` and ``${NAME:-default}`` (``$$`` is a literal ``$``); an unset variable
without a default is a problem. A value made by expansion is read as YAML reads a scalar, so
``${PORT:-9468}`` can fill a number. Secrets are read when the config is loaded and never printed.
Relative paths in the file are relative to the file's folder.

What a setting means and how it is read (the modules the config's sections share with the flags and the
jobs API):

``reader`` reads a parsed YAML or JSON tree with
every problem recorded under its path (``problems``: each keeps its path, the settings its message
names and the wrong part of a spec); ``slo`` defines the SLO (``Slo``) and reads it (``read_slo``)
for the daemon config, a job's parameters and the flags alike; ``target`` defines how to reach a target
(``Api``, ``Secret``, ``Timeouts``) and reads it for ``targets[]`` and the target flags; ``goodput`` reads
goodput bounds; ``cost`` reads a target's accelerators and their price (``targets[]``, the ``capacity`` flags); ``workload`` defines a workload (``WorkloadOptions``: a preset or length distributions,
sessions) and reads it (``read_workload``) for ``modules.<name>`` and the workload flags, with the
length distributions (``lengths``) and think times (``think_time``) it is made of; ``arrival`` defines the
arrival processes and reads them (``read_arrival``) for ``modules.<name>``, a capacity job and the
arrival flags; ``oneshot`` reads a one-shot run's (``bench``, ``capacity``,
``profile``) raw flags: ``read_flags`` puts flag values through the config's readers and names the flag in
each message, and in the settings a message mentions (``or give --decode-deadline``), and
``FlagReading`` reports every bad flag of a command at once; the typed options they are read into are
grouped as the flags are (``target_flags``, ``workload_flags``, ``load_flags``, ``evaluation_flags``),
one dataclass per command holding its groups and its own flags (``bench_options``,
``capacity_options``, ``profile_options``); ``job_params`` defines a job's parameters and the limits the daemon
puts on them (``CapacityParams``, ``ProfileParams``, ``JobLimits``) and ``job_parse`` reads them from a
jobs API request body (the config's ``jobs.limits`` through ``config.jobs``); ``addresses`` checks a
target's URL and a listen address for the config and the flags alike. A new option's meaning goes
here; its flag goes in ``exporter.cli``.

Why a hand-written reader and not a validation library (measured 2026-11-25, Python 3 on the CI VM,
``time.perf_counter`` around the import and first use, ``ru_maxrss``; a bare interpreter is 10.6 MB):
msgspec 0.22 (a ``Struct`` with ``Meta`` bounds and ``msgspec.convert``) costs 26-29 ms and +3.8 MB,
pydantic 2.14 (a ``BaseModel`` with ``Field`` bounds, validated once) 156-164 ms and +18.5 MB. Cost is
not what decides: the 78 exact-message bad-config cases (``tests/settings/test_bad_configs.py``) and the
jobs API's table are. ``msgspec.convert`` stops at the first error and says ``Expected `float` <= 100.0
- at `$.percentile```; an unknown key is ``Object contains unknown field `percentil``` without the valid
keys; pydantic says ``Input should be less than or equal to 100`` and ``Extra inputs are not permitted``.
The ``Section`` reader lists every problem of a file at once, each with its path, the valid keys or
values (``unknown key "percentil"; valid: decode_tiers, goodput, ...``) and the value given, reads
durations (``250ms``) and ``${VAR}`` expansions as YAML scalars, and renames a path to its flag for the
command line (``oneshot.read_flags``). Reproducing that on top of either library would mean a
translation layer of about the reader's size, so the reader stays; msgspec remains the candidate for the
hot JSON decoding of the measuring client, where only speed counts.
"""

from exporter.settings.model import (
    BUCKET_NAMES,
    DEFAULT_LISTEN_ADDRESS,
    DEFAULT_SLO,
    Buckets,
    Budget,
    Config,
    EngineMetrics,
    GlobalConfig,
    Module,
    ProbeSchedule,
    Target,
    Tls,
    UnknownNameError,
    WorkloadSpec,
    default_config,
)
from exporter.settings.parse import load_config, load_config_file, parse_config
from exporter.settings.problems import SettingsError
from exporter.settings.reader import parse_duration
from exporter.settings.slo import Slo

__all__ = [
    "BUCKET_NAMES",
    "DEFAULT_LISTEN_ADDRESS",
    "DEFAULT_SLO",
    "Buckets",
    "Budget",
    "Config",
    "EngineMetrics",
    "GlobalConfig",
    "Module",
    "ProbeSchedule",
    "SettingsError",
    "Slo",
    "Target",
    "Tls",
    "UnknownNameError",
    "WorkloadSpec",
    "default_config",
    "load_config",
    "load_config_file",
    "parse_config",
    "parse_duration",
]
