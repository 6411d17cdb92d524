"""The daemon's HTTP surface (aiohttp): /metrics, /probe, health, readiness, reload, the index page."""
