"""The long-running exporter's parts: the targets (clients, budgets, health: ``targets``), the scheduler,
the loop-lag watcher, the jobs snapshot; ``exporter.app`` wires them around one aiohttp app."""
