"""The daemon's HTTP surface (aiohttp): /metrics, /probe, health, readiness, reload, the index page and
the jobs API, written against Protocols (``routes.DaemonService``, ``jobs_api.JobService``)."""
