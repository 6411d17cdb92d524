"""The Prometheus rules: promtool checks and unit tests, the generated PrometheusRule, and what every
alert must carry (severity, summary, description, a runbook section, firing and silent unit tests)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from exporter.exposition import names
from tests.deploy import files
from tests.deploy.files import needs_promtool, promtool

# A metric name of ours in PromQL: fluidity_... not glued to a recorded name's colons.
METRIC = re.compile(r"(?<![\w:])(fluidity_[a-z0-9_]+)(?![\w:])")
# A recorded name: level:metric:operations.
RECORDED = re.compile(r"(?<![\w:])([a-z_]+:[a-z0-9_]+:[a-z0-9_]+)(?![\w:])")


def generate(*args: str) -> subprocess.CompletedProcess[str]:
    """Run generate.py with ``args``."""
    command = [sys.executable, str(files.GENERATOR), *args]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("generate_prometheus_rule", files.GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def exported_names() -> set[str]:
    """Every series name the exporter exposes (histograms with their three suffixes)."""
    out: set[str] = set()
    for spec in names.ALL:
        if spec.type == "histogram":
            out |= {f"{spec.name}_bucket", f"{spec.name}_count", f"{spec.name}_sum"}
        else:
            out.add(spec.name)
    return out


def all_promql() -> list[tuple[str, str]]:
    """(where, text) of every PromQL the project ships: rule expressions, the queries inside alert
    annotations, the Grafana rules' queries and the runbook's examples."""
    out = [
        (rule.get("record") or rule["alert"], rule["expr"])
        for path in files.RULE_FILES
        for rule in files.rules(path)
    ]
    for alert in files.alerts():
        for key, text in alert["annotations"].items():
            out += [(f"{alert['alert']}.{key}", query) for query in re.findall(r'printf "([^"]+)"', text)]
    out += files.grafana_queries()
    out += [("docs/runbook.md", line) for line in files.runbook_promql()]
    return out


@needs_promtool
def test_promtool_checks_the_rule_files() -> None:
    check = promtool("check", "rules", *map(str, files.RULE_FILES))
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout.count("SUCCESS") == 2


@needs_promtool
def test_promtool_checks_the_groups_of_the_prometheus_rule(tmp_path: Path) -> None:
    spec = files.load(files.PROMETHEUS_RULE)["spec"]
    extracted = tmp_path / "prometheus-rule-groups.yml"
    extracted.write_text(yaml.safe_dump({"groups": spec["groups"]}, sort_keys=False))
    check = promtool("check", "rules", str(extracted))
    assert check.returncode == 0, check.stdout + check.stderr
    count = sum(len(group["rules"]) for group in spec["groups"])
    assert f"SUCCESS: {count} rules found" in check.stdout


@needs_promtool
@pytest.mark.parametrize("path", files.RULE_TESTS, ids=lambda path: path.name)
def test_promtool_unit_tests_pass(path: Path) -> None:
    run = promtool("test", "rules", str(path))
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_prometheus_rule_is_current() -> None:
    run = subprocess.run(
        [sys.executable, str(files.GENERATOR), "--check"], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr


def test_a_stale_prometheus_rule_is_reported(tmp_path: Path) -> None:
    stale = tmp_path / "prometheus-rule.yaml"
    stale.write_text(files.PROMETHEUS_RULE.read_text().replace("14.4", "14.5"))
    run = subprocess.run(
        [sys.executable, str(files.GENERATOR), "--check", "--output", str(stale)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1
    assert f"{stale} is out of date: run python deploy/prometheus/generate.py" in run.stderr


def test_the_prometheus_rule_is_one_document_with_the_groups_of_the_rule_files() -> None:
    documents = list(yaml.safe_load_all(files.PROMETHEUS_RULE.read_text()))
    assert len(documents) == 1
    (resource,) = documents
    assert resource["apiVersion"] == "monitoring.coreos.com/v1"
    assert resource["kind"] == "PrometheusRule"
    assert resource["metadata"] == {
        "name": "fluidity-exporter",
        "labels": {"app.kubernetes.io/name": "fluidity-exporter"},
    }
    assert resource["spec"]["groups"] == [g for path in files.RULE_FILES for g in files.groups(path)]
    assert yaml.safe_load(generator().render())["spec"] == resource["spec"]


def test_rule_files_have_no_trailing_spaces_or_tabs() -> None:
    # Literal blocks in the generated PrometheusRule need lines without them.
    for path in files.RULE_FILES:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert line == line.rstrip() and "\t" not in line, f"{path.name}:{number}"


@pytest.mark.parametrize("alert", files.alerts(), ids=lambda alert: alert["alert"])
def test_every_alert_has_a_severity_summary_description_and_runbook_section(alert: dict[str, Any]) -> None:
    assert alert["labels"]["severity"] in files.SEVERITIES
    annotations = alert["annotations"]
    assert set(annotations) == {"summary", "description", "runbook_url"}
    assert "$labels" in annotations["summary"] + annotations["description"]
    url, _, anchor = annotations["runbook_url"].partition("#")
    assert url.endswith("/docs/runbook.md")
    assert anchor == alert["alert"].lower()
    assert anchor in files.runbook_anchors()


def test_every_alert_links_the_same_runbook_base() -> None:
    bases = {alert["annotations"]["runbook_url"].partition("#")[0] for alert in files.alerts()}
    assert len(bases) == 1, bases  # one base to replace when the docs move


def test_the_runbook_has_a_section_for_every_alert_and_no_other() -> None:
    alertnames = {alert["alert"] for alert in files.alerts()}
    sections = set(re.findall(r"^## (\w+)$", files.RUNBOOK.read_text(), flags=re.MULTILINE))
    assert sections == alertnames


def test_every_alert_fires_and_stays_silent_in_the_unit_tests() -> None:
    fired: set[str] = set()
    silent: set[str] = set()
    for path in files.RULE_TESTS:
        for test in files.load(path)["tests"]:
            for case in test.get("alert_rule_test", []):
                (fired if case.get("exp_alerts") else silent).add(case["alertname"])
    alertnames = {alert["alert"] for alert in files.alerts()}
    assert alertnames - fired == set(), "alerts never seen firing"
    assert alertnames - silent == set(), "alerts never seen silent"
    assert (fired | silent) - alertnames == set(), "unit tests of alerts that do not exist"


def test_every_recording_rule_has_an_expected_value_in_the_unit_tests() -> None:
    expected: set[str] = set()
    for path in files.RULE_TESTS:
        for test in files.load(path)["tests"]:
            for case in test.get("promql_expr_test", []):
                expected |= {sample["labels"].partition("{")[0] for sample in case["exp_samples"]}
    assert files.recorded_names() - expected == set()


@pytest.mark.parametrize("where, promql", all_promql(), ids=lambda value: str(value)[:60])
def test_promql_uses_only_exported_metrics_and_recorded_series(where: str, promql: str) -> None:
    unknown = set(METRIC.findall(promql)) - exported_names()
    assert unknown == set(), f"{where}: not exported by the exporter"
    unrecorded = set(RECORDED.findall(promql)) - files.recorded_names()
    assert unrecorded == set(), f"{where}: not recorded by fluidity-rules.yml"


def test_the_queries_inside_annotations_are_checked_too() -> None:
    inside = [where for where, _ in all_promql() if where.endswith((".summary", ".description"))]
    assert len(inside) >= 10  # the burn-rate, capacity and reload alerts query for their numbers


def _aggregations(promql: str) -> list[str]:
    """The label lists of every ``by (...)`` and ``on (...)`` that names ``target``."""
    return [labels for labels in re.findall(r"\b(?:by|on) \(([^)]*)\)", promql) if "target" in labels]


def test_every_aggregation_keeps_the_identity_labels() -> None:
    kept = ", ".join(files.IDENTITY_LABELS) + ", "
    assert generator().IDENTITY_LABELS == files.IDENTITY_LABELS
    lists = [(where, labels) for where, promql in all_promql() for labels in _aggregations(promql)]
    assert len(lists) > 40
    assert [(where, labels) for where, labels in lists if not labels.startswith(kept)] == []


def test_the_queries_inside_annotations_match_on_the_identity_labels() -> None:
    matchers = "".join(f"{label}=%q," for label in files.IDENTITY_LABELS)
    for where, query in all_promql():
        if where.endswith(".description") and "target=%q" in query:
            assert matchers + "target=%q" in query, where


@needs_promtool
def test_other_identity_labels_are_written_everywhere(tmp_path: Path) -> None:
    output = tmp_path / "rules.yml"
    run = generate("--identity-labels", "k8s_cluster,tenant", "--plain", "--output", str(output))
    assert run.returncode == 0, run.stderr
    check = promtool("check", "rules", str(output))
    assert check.returncode == 0, check.stdout + check.stderr
    text = output.read_text()
    assert "namespace" not in text and re.search(r"\bcluster\b", text) is None
    rules = [rule for group in yaml.safe_load(text)["groups"] for rule in group["rules"]]
    lists = [labels for rule in rules for labels in _aggregations(rule["expr"])]
    assert len(lists) > 40 and all(labels.startswith("k8s_cluster, tenant, target") for labels in lists)
    assert text.count("k8s_cluster=%q,tenant=%q,target=%q") == 6
    assert text.count("$labels.k8s_cluster $labels.tenant $labels.target") == 6


@pytest.mark.parametrize(
    "value, message",
    [("a b", "not a Prometheus label name: a b"), ("job,job", "a label named twice: job,job")],
)
def test_bad_identity_labels_are_refused_by_name(value: str, message: str) -> None:
    run = generate("--identity-labels", value, "--output", "/dev/null")
    assert run.returncode == 2 and message in run.stderr
