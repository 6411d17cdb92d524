"""The options layer: what a setting means and how it is read, defined once for YAML, JSON and flags.

The lowest layer beside ``exporter.stats``: it imports no other package of ours but ``stats`` (whose
types some options produce, e.g. ``GoodputBounds``). ``reader`` reads a parsed YAML or JSON tree with
every problem recorded under its path; ``slo`` defines the SLO (``SloOptions``) and reads it
(``read_slo``) for the daemon config, a job's parameters and the flags alike; ``target`` defines how to reach a target
(``Api``, ``Secret``, ``Timeouts``) and reads it for ``targets[]`` and the target flags; ``goodput`` reads
goodput bounds; ``oneshot`` is the flat options mapping of a one-shot run (``bench``, ``capacity``, ``profile``),
the error a bad option raises, and ``read_flags``, which puts flag values through the config's readers
and names the flag in each message. A new option's meaning goes here; its
flag goes in ``exporter.cli``.
"""
