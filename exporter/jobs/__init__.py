"""Long jobs run on demand or on a schedule: capacity search and prefill profiling.

``capacity_loop`` searches for the highest load that meets the SLO (its loop, the drain before a trial
and the first look; ``capacity_search`` the pure state and next step, with ``capacity_model``'s engine
model predicting beside it; ``trial`` one trial planned and run, in process or sharded, ``trial_verdict`` its pure
verdict and report; ``capacity_result`` what the search found, ``capacity_report`` its progress and
the result as a person reads it); ``prefill_profile`` fits
the prefill deadline model; ``manager`` runs jobs, one per target at a time, bounded and cancellable;
``job_records`` and ``profiles`` keep results on disk; ``capacity_runner`` and ``profile_runner`` turn
parameters (``exporter.settings.job_params``) into runs against a configured target, with what
``job_environment`` gives them (the daemon's side, the shards); ``local_capacity`` and ``local_profile``
run a search or a profile from this process (the ``capacity`` and ``profile`` commands), without the
daemon.
"""
