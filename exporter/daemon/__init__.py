"""The long-running exporter's parts, each with one job: the targets (clients, budgets, health:
``targets``), what goes on the scheduler and probes on demand (``probe_jobs``), the daemon as its jobs and
the jobs API see it (``job_environment``), the scheduler, the loop-lag watcher, what the daemon derives
from its config (``config_facts``) and the jobs snapshot; ``exporter.app`` wires them around one aiohttp
app."""
