"""Grafana dashboards of the Fluidity Exporter, written with grafanalib.

Each ``*.dashboard.py`` defines a ``dashboard`` (grafanalib's convention); ``python -m dashboards``
writes its JSON beside it (``overview.dashboard.py`` -> ``overview.json``) and ``python -m dashboards
--check`` fails when a committed JSON file differs from what its source generates. ``common`` holds the
pieces every dashboard shares (template variables, query and panel builders, layout); ``build`` turns a
source into the JSON Grafana 10+ imports.
"""
