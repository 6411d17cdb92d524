"""The options layer: what a setting means and how it is read, defined once for YAML, JSON and flags.

The lowest layer beside ``exporter.stats``: it imports no other package of ours but ``stats`` (whose
types some options produce, e.g. ``GoodputBounds``). ``reader`` reads a parsed YAML or JSON tree with
every problem recorded under its path (``problems``: each keeps its path, the settings its message
names and the wrong part of a spec); ``slo`` defines the SLO (``SloOptions``) and reads it (``read_slo``)
for the daemon config, a job's parameters and the flags alike; ``target`` defines how to reach a target
(``Api``, ``Secret``, ``Timeouts``) and reads it for ``targets[]`` and the target flags; ``goodput`` reads
goodput bounds; ``cost`` reads a target's accelerators and their price (``targets[]``, the ``capacity`` flags); ``workload`` defines a workload (``WorkloadOptions``: a preset or length distributions,
sessions) and reads it (``read_workload``) for ``modules.<name>`` and the workload flags, with the
length distributions (``lengths``) and think times (``think_time``) it is made of; ``arrival`` defines the
arrival processes and reads them (``read_arrival``) for ``modules.<name>``, a capacity job and the
arrival flags; ``oneshot`` is the flat options mapping of a one-shot run (``bench``, ``capacity``,
``profile``), the error a bad option raises, and ``read_flags``, which puts flag values through the
config's readers and names the flag in each message, and in the settings a message mentions
(``or give --decode-deadline``); ``job_params`` defines a job's parameters and the limits the daemon
puts on them (``CapacityParams``, ``ProfileParams``, ``JobLimits``) and ``job_parse`` reads them from a
jobs API request body (the config's ``jobs.limits`` through ``config.jobs``); ``addresses`` checks a
target's URL and a listen address for the config and the flags alike. A new option's meaning goes
here; its flag goes in ``exporter.cli``.

Why a hand-written reader and not a validation library (measured 2026-11-25, Python 3 on the CI VM,
``time.perf_counter`` around the import and first use, ``ru_maxrss``; a bare interpreter is 10.6 MB):
msgspec 0.22 (a ``Struct`` with ``Meta`` bounds and ``msgspec.convert``) costs 26-29 ms and +3.8 MB,
pydantic 2.14 (a ``BaseModel`` with ``Field`` bounds, validated once) 156-164 ms and +18.5 MB. Cost is
not what decides: the 78 exact-message bad-config cases (``tests/config/test_bad_configs.py``) and the
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
