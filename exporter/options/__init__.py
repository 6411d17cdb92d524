"""The options layer: what a setting means and how it is read, defined once for YAML, JSON and flags.

The lowest layer beside ``exporter.stats``: it imports no other package of ours but ``stats`` (whose
types some options produce, e.g. ``GoodputBounds``). ``reader`` reads a parsed YAML or JSON tree with
every problem recorded under its path; ``goodput`` reads goodput bounds for the daemon config, the jobs
API and ``--goodput`` alike; ``oneshot`` is the flat options mapping of a one-shot run (``bench``,
``capacity``, ``profile``) and the error a bad option raises. A new option's meaning goes here; its
flag goes in ``exporter.cli``.
"""
