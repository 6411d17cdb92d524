"""The Grafana-managed alert rules, contact points and notification policies: their structure, and that
the rules are the Prometheus burn-rate alerts (windows, thresholds, `for`, severities, objective).
Their queries run against a real Prometheus in test_rules_live.py."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.deploy import files

DATASOURCE_UID = "prometheus"  # documented in fluidity-alert-rules.yaml: the Prometheus data source's uid
EXPRESSION_UID = "__expr__"  # Grafana's server-side expressions
DURATION = re.compile(r"^(\d+[smhd])+$")
NO_DATA_STATES = {"NoData", "Alerting", "OK", "KeepLast"}
ERROR_STATES = {"Error", "Alerting", "OK", "KeepLast"}


def prometheus_burn_alerts() -> dict[tuple[str, str], dict[str, Any]]:
    """The Prometheus burn-rate alert rules, the probes' and real traffic's, by (alertname, long window)."""
    return {
        (alert["alert"], alert["labels"]["long_window"]): alert
        for alert in files.alerts()
        if "long_window" in alert["labels"]
    }


def test_the_rules_file_is_grafana_provisioning_version_1() -> None:
    document = files.load(files.GRAFANA_RULES)
    assert document["apiVersion"] == 1
    for group in document["groups"]:
        assert {"orgId", "name", "folder", "interval", "rules"} <= set(group)
        assert DURATION.match(group["interval"])
    uids = [rule["uid"] for rule in files.grafana_rules()]
    titles = [rule["title"] for rule in files.grafana_rules()]
    assert len(set(uids)) == len(uids) and len(set(titles)) == len(titles)
    assert all(len(uid) <= 40 for uid in uids)  # Grafana's limit on rule uids


@pytest.mark.parametrize("rule", files.grafana_rules(), ids=lambda rule: rule["uid"])
def test_every_rule_is_complete(rule: dict[str, Any]) -> None:
    ref_ids = [query["refId"] for query in rule["data"]]
    assert len(set(ref_ids)) == len(ref_ids)
    assert rule["condition"] in ref_ids
    for query in rule["data"]:
        assert query["model"]["refId"] == query["refId"]
        assert query["datasourceUid"] in {DATASOURCE_UID, EXPRESSION_UID}
        if query["datasourceUid"] == DATASOURCE_UID:
            assert query["model"]["instant"] is True and query["model"]["expr"].strip()
            assert query["relativeTimeRange"]["from"] > 0
        else:
            referenced = set(re.findall(r"\$(\w+)", query["model"]["expression"]))
            assert referenced and referenced <= set(ref_ids) - {query["refId"]}
    assert DURATION.match(rule["for"])
    assert rule["noDataState"] in NO_DATA_STATES and rule["execErrState"] in ERROR_STATES
    assert rule["labels"]["severity"] in files.SEVERITIES
    assert not any("$" in value for value in rule["labels"].values())  # Grafana would expand it
    annotations = rule["annotations"]
    assert {"summary", "description", "runbook_url"} <= set(annotations)
    assert not any("${" in value for value in annotations.values())
    assert annotations["runbook_url"].partition("#")[2] in files.runbook_anchors()


def guarded() -> set[str]:
    """The windows whose service level needs as much history (fluidity-rules.yml: a sample `offset` the
    window)."""
    return {
        w
        for rule in files.rules(files.RECORDING_RULES)
        if rule["record"].startswith("target_module_tier:fluidity_service_level:")
        for w in re.findall(r"offset (\w+)", rule["expr"])
    }


def test_the_guarded_windows_are_the_long_ones_from_6h() -> None:
    assert guarded() == {"6h", "1d", "3d"}


def test_the_rules_are_the_prometheus_burn_rate_alerts() -> None:
    expected = prometheus_burn_alerts()
    seen = set()
    for rule in files.grafana_rules():
        alertname = rule["title"].split(" ")[0]
        labels = rule["labels"]
        alert = expected[(alertname, labels["long_window"])]
        seen.add((alertname, labels["long_window"]))
        assert labels == alert["labels"]
        assert rule["for"] == alert["for"]
        assert rule["annotations"]["runbook_url"] == alert["annotations"]["runbook_url"]
        thresholds = set(re.findall(r"> ([\d.]+)", alert["expr"]))
        (condition,) = [q for q in rule["data"] if q["refId"] == rule["condition"]]
        assert set(re.findall(r"> ([\d.]+)", condition["model"]["expression"])) == thresholds
        windows = {labels["long_window"], labels["short_window"]}
        queried = {w for _, promql in _queries(rule) for w in re.findall(r"\[(\w+)\](?! offset)", promql)}
        assert queried == windows
        guarded_here = {w for _, promql in _queries(rule) for w in re.findall(r"offset (\w+)", promql)}
        assert guarded_here == windows & guarded(), rule["uid"]
    assert seen == set(expected)


def test_the_traffic_rules_need_the_prometheus_alerts_floor_of_completed_requests() -> None:
    """Real traffic's rules fire, as the Prometheus ones do, only where enough user requests completed
    over the long window: the same floor, over the same window, in the long window's query."""
    expected = prometheus_burn_alerts()
    traffic = [rule for rule in files.grafana_rules() if rule["title"].startswith("FluidityTraffic")]
    assert len(traffic) == 4
    for rule in traffic:
        alert = expected[(rule["title"].split(" ")[0], rule["labels"]["long_window"])]
        floor = re.findall(
            r"increase\(fluidity_traffic_requests_total\{outcome=\"ok\"\}\[(\w+)\]\)\) >= (\d+)",
            alert["expr"],
        )
        assert floor == [(rule["labels"]["long_window"], "10")], alert["expr"]
        queries = dict(_queries(rule))
        assert re.findall(r"requests_total\{outcome=\"ok\"\}\[(\w+)\]\)\) >= (\d+)", queries["A"]) == floor
        assert "requests_total" not in queries["B"]


def test_the_queries_use_the_objective_and_tier_of_the_recording_rules() -> None:
    ratio, tier = files.objective()
    for where, promql in files.grafana_queries():
        assert f"/ (1 - {ratio:g})" in promql, where
        assert set(re.findall(r'tier="(\w+)"', promql)) == {tier}, where


def test_the_queries_keep_the_identity_labels_of_the_recording_rules() -> None:
    kept = ", ".join(files.IDENTITY_LABELS)
    for where, promql in files.grafana_queries():
        groupings = re.findall(r"\bby \(([^)]*)\)", promql)
        assert groupings and all(g.startswith(kept + ", ") for g in groupings), where


def test_contact_points_are_named_once_with_a_webhook_and_an_email() -> None:
    document = files.load(files.CONTACT_POINTS)
    assert document["apiVersion"] == 1
    points = document["contactPoints"]
    names = [point["name"] for point in points]
    uids = [receiver["uid"] for point in points for receiver in point["receivers"]]
    assert len(set(names)) == len(names) and len(set(uids)) == len(uids)
    types = {receiver["type"] for point in points for receiver in point["receivers"]}
    assert types == {"webhook", "email"}


def test_policies_route_every_severity_to_an_existing_contact_point() -> None:
    document = files.load(files.POLICIES)
    assert document["apiVersion"] == 1
    contact_points = {point["name"] for point in files.load(files.CONTACT_POINTS)["contactPoints"]}
    (root,) = document["policies"]
    assert root["receiver"] in contact_points
    routed = {}
    for route in root["routes"]:
        assert route["receiver"] in contact_points
        for label, operator, value in route["object_matchers"]:
            if label == "severity" and operator == "=":
                routed[value] = route["receiver"]
    assert set(routed) == set(files.SEVERITIES)
    assert routed["page"] != routed["ticket"]


def _queries(rule: dict[str, Any]) -> list[tuple[str, str]]:
    return [(q["refId"], q["model"]["expr"]) for q in rule["data"] if q["datasourceUid"] == DATASOURCE_UID]


def test_the_file_names_every_prometheus_only_alert_and_each_alert_it_mentions_is_in_it_or_listed() -> None:
    """The file's header lists the alerts it does not carry (they must be deployed as Prometheus rules),
    and no comment points at an alert as if the file had it when it is not listed there."""
    text = files.GRAFANA_RULES.read_text()
    header = text.partition("\napiVersion:")[0]
    here = {rule["title"].split(" ")[0] for rule in files.grafana_rules()}
    prometheus_only = {alert["alert"] for alert in files.alerts()} - here
    listed = set(re.findall(r"\bFluidity\w+", header.partition("exist only as Prometheus rules:")[2]))
    assert listed == prometheus_only
    mentioned = set(re.findall(r"#.*?\b(Fluidity[A-Z]\w+)", text))
    assert mentioned <= here | prometheus_only
    body_comments = re.findall(r"#.*", text.partition("\napiVersion:")[2])
    assert not any(name in comment for comment in body_comments for name in prometheus_only), body_comments
