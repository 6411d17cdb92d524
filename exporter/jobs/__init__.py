"""Long jobs run on demand or on a schedule: capacity search and prefill profiling.

``capacity`` searches for the highest load that meets the SLO (``capacity_search`` the pure search,
``trial`` and ``trial_shards`` one trial, ``drain`` waiting for the engine to go idle); ``prefill_profile``
fits the prefill deadline model; ``manager`` runs jobs, one per target at a time, bounded and cancellable;
``store`` and ``profiles`` keep results on disk; ``capacity_runner`` and ``profile_runner`` turn parameters
(``exporter.config.job_params``) into runs against a configured target, with what ``job_environment`` gives
them (the daemon's side, the shards).
"""
