"""Generated tokens per GPU-second, as the capacity dashboard, docs/capacity.md and the HELP of
fluidity_target_gpus state it, evaluated by promtool over replicas that each have their own exporter."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from exporter.exposition import names
from tests.dashboards.panels import queries
from tests.deploy.files import needs_promtool

REPO = Path(__file__).resolve().parents[2]
PANEL = "Generated tokens per GPU-second (live)"

# Target llm: two replicas, each with an exporter that scrapes its own engine (100 and 300 tokens/s)
# and declares its 2 GPUs: 400 tokens/s over 4 GPUs. Target small: one replica, 50 tokens/s on 1 GPU.
REPLICAS = [
    ("a:9468", "llm", 100, 2),
    ("b:9468", "llm", 300, 2),
    ("c:9468", "small", 50, 1),
]
EXPECTED = {"llm": 100, "small": 50}


def dashboard_query() -> str:
    [query] = [q for q in queries() if q.dashboard == "capacity" and q.panel["title"] == PANEL]
    expr: str = query.target["expr"]
    return expr.replace("$__rate_interval", "5m").replace('"$target"', '".*"')


def help_query() -> str:
    match = re.search(
        r"sum by \(target\) \(rate\(.*?\)\) / sum by \(target\) \([a-z_]+\)", names.TARGET_GPUS.help
    )
    assert match, names.TARGET_GPUS.help
    return match.group(0)


def docs_query() -> str:
    found = re.findall(
        r"`([^`]*/[^`]*fluidity_target_gpus[^`]*)`", (REPO / "docs" / "capacity.md").read_text()
    )
    assert len(found) == 1, found
    return str(found[0])


def unit_test(expr: str) -> dict[str, object]:
    series = []
    for instance, target, tokens_per_s, gpus in REPLICAS:
        labels = f'instance="{instance}",job="fluidity-exporter",target="{target}"'
        series += [
            {
                "series": f"{names.ENGINE_GENERATION_TOKENS.name}{{{labels}}}",
                "values": f"0+{tokens_per_s * 60}x20",
            },
            {"series": f"{names.TARGET_GPUS.name}{{{labels}}}", "values": f"{gpus}x20"},
        ]
    expected = [{"labels": f'{{target="{t}"}}', "value": v} for t, v in sorted(EXPECTED.items())]
    return {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [{"expr": expr, "eval_time": "15m", "exp_samples": expected}],
            }
        ],
    }


@needs_promtool
@pytest.mark.parametrize("where", ["dashboard", "help", "docs"])
def test_tokens_per_gpu_second_adds_up_over_replicas(where: str, tmp_path: Path) -> None:
    expr = {"dashboard": dashboard_query, "help": help_query, "docs": docs_query}[where]()
    path = tmp_path / "per-gpu.test.yml"
    path.write_text(yaml.safe_dump(unit_test(expr), sort_keys=False))
    run = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, check=False, timeout=120
    )
    assert run.returncode == 0, f"{expr}\n{run.stdout}{run.stderr}"
