"""Shards: load too heavy for one process, dealt over client processes or pods and merged.

One concept, six modules, read in this order:

* ``tasks``: what a shard is given (``ShardTask``: its slice of a plan and the target's settings),
  how a plan is dealt (open loop by due time, closed loop by a concurrency split), and the JSON that
  carries tasks and results between processes (stamps rebased on the coordinator's clock).
* ``pool``: the coordinator (``ShardPool``): the HTTP endpoints the shards poll and post to, and
  ``run_plan``, which deals a plan, starts every shard at one instant, feeds the caller's hooks and
  merges what comes back. ``remote_shards`` is a pool of pods of an Indexed Job.
* ``runs``: one run's state on the coordinator (``ShardRun``), updated by the shards' event posts.
* ``reports``: each shard's fate and the merged run (``ShardRunReport``), with the problems that
  make a run unfit to judge (``shard_problems``).
* ``worker``: the shard's side (``serve_shard``, what ``fluidity-exporter shard`` runs): take a task,
  send the slice through the one load runner, post results.
* ``local``: a pool of shard processes on this machine (``--workers``, the daemon's ``jobs.workers``).

How a coordinator judges its shards is a setting (``exporter.settings.shards.PoolSettings``); a
capacity trial over shards is a trial like any other (``exporter.jobs.trial.run_sharded_trial``).
"""
