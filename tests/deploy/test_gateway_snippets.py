"""The documented snippets for meshes and gateways (``deploy/gateways/``), which no cluster here runs:
their YAML parses, the Istio EnvoyFilter's filter is the one ``fluidity-exporter envoy-config`` writes
(same settings) and the real Envoy accepts it in a bootstrap, the Envoy Gateway policy uses only the
fields of Envoy Gateway's v1alpha1 ExtProc API, and the built-in kinds pass kubernetes-validate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.traffic.envoy_config import Endpoint, Upstream, bootstrap, ext_proc_filter, render
from tests.deploy.kubernetes.manifests import validate as validate_resource
from tests.support.envoy import validate as validate_envoy

GATEWAYS = Path(__file__).resolve().parents[2] / "deploy" / "gateways"
ISTIO = GATEWAYS / "istio-envoyfilter.yaml"
ENVOY_GATEWAY = GATEWAYS / "envoy-gateway-extension-policy.yaml"
OBSERVER_PORT = 9471  # traffic.ext_proc_address's port in the overlays and docs/traffic-deploy.md
# Envoy Gateway's api/v1alpha1/ext_proc_types.go (v1.5): the keys an ExtProc entry and its parts take.
EXT_PROC_KEYS = {
    "backendRef",
    "backendRefs",
    "backendSettings",
    "stage",
    "messageTimeout",
    "failOpen",
    "processingMode",
    "metadata",
}
PROCESSING_MODE_KEYS = {"request", "response", "allowModeOverride"}
PROCESSING_OPTIONS_KEYS = {"body", "attributes"}
BODY_MODES = {"Streamed", "Buffered", "BufferedPartial", "FullDuplexStreamed"}


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def one(path: Path, kind: str) -> dict[str, Any]:
    (document,) = [d for d in documents(path) if d["kind"] == kind]
    return document


def istio_filter() -> dict[str, Any]:
    (patch,) = one(ISTIO, "EnvoyFilter")["spec"]["configPatches"]
    value: dict[str, Any] = patch["patch"]["value"]
    return value


@pytest.mark.parametrize("path", sorted(GATEWAYS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_snippet_parses_and_says_it_is_untested_here(path: Path) -> None:
    assert documents(path)
    assert path.read_text().startswith("# UNTESTED HERE (no cluster)")
    for document in documents(path):
        assert {"apiVersion", "kind", "metadata", "spec"} <= set(document), document.get("kind")


def test_the_istio_filter_is_the_envoy_config_filter_over_loopback() -> None:
    ours, theirs = ext_proc_filter()["typed_config"], istio_filter()["typed_config"]
    assert istio_filter()["name"] == ext_proc_filter()["name"]
    # The same settings but the service: a loopback address Istio's sidecar reaches without a cluster.
    assert {k: v for k, v in theirs.items() if k != "grpc_service"} == {
        k: v for k, v in ours.items() if k != "grpc_service"
    }
    assert theirs["grpc_service"]["google_grpc"]["target_uri"] == f"127.0.0.1:{OBSERVER_PORT}"
    patch = one(ISTIO, "EnvoyFilter")["spec"]["configPatches"][0]
    assert patch["applyTo"] == "HTTP_FILTER" and patch["patch"]["operation"] == "INSERT_BEFORE"
    assert (
        patch["match"]["listener"]["filterChain"]["filter"]["subFilter"]["name"]
        == "envoy.filters.http.router"
    )


def test_the_real_envoy_accepts_the_istio_filter(tmp_path: Path) -> None:
    document = bootstrap(
        Upstream.of_url("http://127.0.0.1:8000"),
        Endpoint("127.0.0.1", 8080),
        Endpoint("127.0.0.1", OBSERVER_PORT),
        Endpoint("127.0.0.1", 9901),
    )
    (listener,) = document["static_resources"]["listeners"]
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    assert manager["http_filters"][0]["name"] == "envoy.filters.http.ext_proc"
    manager["http_filters"][0] = istio_filter()
    config = tmp_path / "envoy.yaml"
    config.write_text(render(document))
    run = validate_envoy(config)
    assert run.returncode == 0, run.stdout + run.stderr


def test_the_envoy_gateway_policy_uses_the_api_s_fields_and_streams_both_bodies() -> None:
    policy = one(ENVOY_GATEWAY, "EnvoyExtensionPolicy")
    assert policy["apiVersion"] == "gateway.envoyproxy.io/v1alpha1"
    assert set(policy["spec"]) == {"targetRefs", "extProc"}
    (target,) = policy["spec"]["targetRefs"]
    assert target["group"] == "gateway.networking.k8s.io" and target["kind"] in {"HTTPRoute", "Gateway"}
    (ext_proc,) = policy["spec"]["extProc"]
    assert set(ext_proc) <= EXT_PROC_KEYS
    assert set(ext_proc["processingMode"]) <= PROCESSING_MODE_KEYS
    for side in ("request", "response"):
        assert set(ext_proc["processingMode"][side]) <= PROCESSING_OPTIONS_KEYS
        assert ext_proc["processingMode"][side]["body"] == "Streamed"
    assert ext_proc["failOpen"] is True  # the observer down: traffic flows
    (backend,) = ext_proc["backendRefs"]
    service = one(ENVOY_GATEWAY, "Service")
    assert backend["name"] == service["metadata"]["name"]
    assert backend["port"] == service["spec"]["ports"][0]["port"] == OBSERVER_PORT


def test_the_observer_service_and_policy_are_valid_and_admit_the_gateway_only() -> None:
    for kind in ("Service", "NetworkPolicy"):
        validate_resource(one(ENVOY_GATEWAY, kind))
    policy = one(ENVOY_GATEWAY, "NetworkPolicy")
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": OBSERVER_PORT, "protocol": "TCP"}]
    (source,) = rule["from"]
    assert source["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "envoy-gateway-system"
    }
