"""The long-running exporter's parts, each with one job: the targets (one client, budget and health each:
``target_pool``, with ``budget`` and ``target_health``), the traffic observer as the daemon runs it
(``traffic_service``), what goes on the scheduler and probes on demand
(``probe_jobs``; which jobs a config plans, ``planned_jobs``; their tasks in flight, ``running_jobs``;
on-demand probes' deadlines, which a shutdown cuts short, ``on_demand``), the daemon as its jobs and the
jobs API see it (``job_host``), the scheduler (``scheduler``), the loop-lag watcher
(``loop_lag``), what the daemon derives from its config (``config_facts``) and the finished jobs as the
collector shows them (``job_snapshots``); ``exporter.app`` wires them around one aiohttp app."""
