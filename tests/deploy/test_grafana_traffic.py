"""Real traffic's Grafana-managed burn rates on known counters, through Prometheus' own rule engine
(``promtool test rules``), for the live stack observes no traffic and its queries return nothing there.
Each Prometheus query of the Grafana traffic rules becomes a recording rule beside the Prometheus
recording rules, and its value is checked against the burn rate those give for the same counters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy import files
from tests.deploy.files import needs_promtool, promtool

SERIES = '{instance="a:9468",job="fluidity-exporter",model="llama",api="chat",'
LABELS = '{job="fluidity-exporter", model="llama", tier="medium"}'
BURN_RATE = 20  # 20% of the medium tier's deadlines missed, against the 1% the objective allows
EVAL = "100m"  # the windows up to 2h have samples; the guarded ones (6h and over) lack their history
# Completed user requests a minute: 10 clears the floor of 10 a window, 0.1 (6 an hour) does not.
VOLUMES = {"steady": "0+10x120", "sparse": "0+0.1x120"}


def traffic_queries() -> list[tuple[str, str]]:
    return [(where, promql) for where, promql in files.grafana_queries() if "fluidity_traffic_" in promql]


def recorded(where: str) -> str:
    """The recording rule's name a query ``uid/refId`` runs under here."""
    return "grafana:" + where.replace("-", "_").replace("/", ":")


def expected(promql: str, volume: str) -> list[dict[str, Any]]:
    """What a query gives at ``EVAL``: nothing for a window that needs more history than two hours,
    or for a long window's query under the floor of completed requests; else the burn rate."""
    if "offset" in promql or ("requests_total" in promql and volume == "sparse"):
        return []
    return [{"labels": LABELS, "value": BURN_RATE}]


def unit_test(volume: str, rules: Path) -> dict[str, Any]:
    queries = traffic_queries()
    rules.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {"name": "grafana", "rules": [{"record": recorded(w), "expr": q} for w, q in queries]}
                ]
            }
        )
    )
    checks = [
        {
            "expr": f"round({recorded(where)}, 0.001)",
            "eval_time": EVAL,
            "exp_samples": expected(promql, volume),
        }
        for where, promql in queries
    ]
    checks.append(
        {
            "expr": "round(model_tier:fluidity_traffic_slo_burn_rate:ratio_rate1h, 0.001)",
            "eval_time": EVAL,
            "exp_samples": [{"labels": LABELS, "value": BURN_RATE}],
        }
    )
    series = [
        (f'fluidity_traffic_deadlines_total{SERIES}tier="medium"}}', "0+1000x120"),
        (f'fluidity_traffic_deadlines_missed_total{SERIES}tier="medium"}}', "0+200x120"),
        (f'fluidity_traffic_deadlines_total{SERIES}tier="strict"}}', "0+1000x120"),
        (f'fluidity_traffic_deadlines_missed_total{SERIES}tier="strict"}}', "0+900x120"),
        (f'fluidity_traffic_requests_total{SERIES}outcome="ok"}}', VOLUMES[volume]),
    ]
    return {
        "rule_files": [str(rules), str(files.RECORDING_RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": name, "values": values} for name, values in series],
                "promql_expr_test": checks,
            }
        ],
    }


def test_every_traffic_rule_is_checked_here() -> None:
    queries = traffic_queries()
    assert len(queries) == 8  # four rules, a long and a short window each
    # Steady: the 1h, 5m, 30m and 2h windows' queries give the burn rate; sparse: not the 1h's (floor).
    assert sum(bool(expected(q, "steady")) for _, q in queries) == 4
    assert sum(bool(expected(q, "sparse")) for _, q in queries) == 3


@needs_promtool
@pytest.mark.parametrize("volume", VOLUMES)
def test_the_traffic_burn_rates_are_the_recorded_ones_above_the_floor(volume: str, tmp_path: Path) -> None:
    test_file = tmp_path / "grafana-traffic.test.yml"
    test_file.write_text(yaml.safe_dump(unit_test(volume, tmp_path / "grafana-traffic.yml"), sort_keys=False))
    run = promtool("test", "rules", str(test_file))
    assert run.returncode == 0, run.stdout + run.stderr
