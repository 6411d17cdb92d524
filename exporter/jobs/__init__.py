"""Long jobs run on demand or on a schedule: capacity search and prefill profiling.

``capacity`` searches for the highest load that meets the SLO (``capacity_search`` the pure search's
next step, ``search_state`` what its trials show, ``trial`` and ``trial_shards`` one trial,
``trial_verdict`` its pure verdict, ``drain`` waiting for the engine to go idle, ``search_progress``
what an operator watches, ``capacity_report`` the result as a person reads it); ``prefill_profile`` fits
the prefill deadline model; ``manager`` runs jobs, one per target at a time, bounded and cancellable;
``store`` and ``profiles`` keep results on disk; ``capacity_runner`` and ``profile_runner`` turn
parameters (``exporter.settings.job_params``) into runs against a configured target, with what
``job_environment`` gives them (the daemon's side, the shards); ``local_capacity`` and ``local_profile``
run a search or a profile from this process (the ``capacity`` and ``profile`` commands), without the
daemon.
"""
