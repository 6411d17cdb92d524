"""The Envoy bootstrap that puts the observer beside an engine: a listener proxying every request to the
upstream, with an ``ext_proc`` HTTP filter in observability mode (Envoy sends headers and body chunks as
they pass and never waits for an answer) and ``failure_mode_allow`` (traffic flows when the observer is
down). Pure data: ``bootstrap`` builds the document, ``render`` writes it as YAML.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import yaml

from exporter.settings.addresses import check_listen_address, check_target_url

OBSERVER_CLUSTER = "fluidity_observer"
UPSTREAM_CLUSTER = "engine"
# Envoy's admin interface can stop the proxy and dump its config: loopback by default (Envoy's own port).
DEFAULT_ADMIN = "127.0.0.1:9901"
# A generation can stream for many minutes: no route timeout (0 disables it), and an idle timeout that
# only ends a stream that has sent nothing at all for this long (a stalled engine), not a slow one.
STREAM_IDLE_TIMEOUT = "300s"
# In observability mode Envoy keeps the gRPC stream open this long after the HTTP stream ends, so that
# the last chunks still reach the observer.
DEFERRED_CLOSE_TIMEOUT = "5s"
_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
_EXT_PROC = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
_ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
_HTTP_OPTIONS = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
_TLS = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"


@dataclass(frozen=True)
class Endpoint:
    """A host and port, as Envoy's ``socket_address`` wants them."""

    host: str
    port: int

    @classmethod
    def of_listen(cls, text: str, field: str) -> Endpoint:
        """``HOST:PORT`` (IPv6 in brackets); an empty host is every interface."""
        try:
            checked = check_listen_address(text)
        except ValueError as exc:
            raise ValueError(f"{field}: {exc}") from None
        host, _, port = checked.rpartition(":")
        return cls(host.strip("[]") or "0.0.0.0", int(port))


@dataclass(frozen=True)
class Upstream:
    """The engine Envoy proxies to: its endpoint and whether it speaks TLS."""

    endpoint: Endpoint
    tls: bool

    @classmethod
    def of_url(cls, text: str) -> Upstream:
        """``http(s)://host[:port]``; a path would need a rewrite Envoy is not given, so it is refused."""
        try:
            url = check_target_url(text)
        except ValueError as exc:
            raise ValueError(f"--upstream: {exc}") from None
        parts = urlsplit(url)
        if parts.path not in ("", "/"):
            raise ValueError(f"--upstream: give the engine's root URL without a path, got {parts.path!r}")
        tls = parts.scheme == "https"
        port = parts.port if parts.port is not None else (443 if tls else 80)
        return cls(Endpoint(parts.hostname or "", port), tls)


def _socket_address(endpoint: Endpoint) -> dict[str, Any]:
    return {"socket_address": {"address": endpoint.host, "port_value": endpoint.port}}


def _cluster(name: str, endpoint: Endpoint) -> dict[str, Any]:
    """A cluster of one endpoint; a name is resolved by DNS, as Kubernetes services are."""
    return {
        "name": name,
        "type": "STRICT_DNS",
        "connect_timeout": "5s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _socket_address(endpoint)}}]}],
        },
    }


def _observer_cluster(observer: Endpoint) -> dict[str, Any]:
    cluster = _cluster(OBSERVER_CLUSTER, observer)
    # gRPC runs over HTTP/2.
    cluster["typed_extension_protocol_options"] = {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": _HTTP_OPTIONS,
            "explicit_http_config": {"http2_protocol_options": {}},
        }
    }
    return cluster


def _upstream_cluster(upstream: Upstream) -> dict[str, Any]:
    cluster = _cluster(UPSTREAM_CLUSTER, upstream.endpoint)
    if upstream.tls:
        cluster["transport_socket"] = {
            "name": "envoy.transport_sockets.tls",
            "typed_config": {"@type": _TLS, "sni": upstream.endpoint.host},
        }
    return cluster


def ext_proc_filter() -> dict[str, Any]:
    """The observer's filter. Request headers and body carry the route, the model and ``max_tokens``;
    response headers and each body chunk as it passes carry the stream. Trailers carry nothing we use."""
    return {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            "@type": _EXT_PROC,
            "grpc_service": {"envoy_grpc": {"cluster_name": OBSERVER_CLUSTER}},
            "observability_mode": True,
            "failure_mode_allow": True,
            "deferred_close_timeout": DEFERRED_CLOSE_TIMEOUT,
            "processing_mode": {
                "request_header_mode": "SEND",
                "response_header_mode": "SEND",
                "request_body_mode": "STREAMED",
                "response_body_mode": "STREAMED",
                "request_trailer_mode": "SKIP",
                "response_trailer_mode": "SKIP",
            },
        },
    }


def _connection_manager(upstream: Upstream) -> dict[str, Any]:
    route = {"cluster": UPSTREAM_CLUSTER, "timeout": "0s"}
    return {
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            "@type": _HCM,
            "stat_prefix": "fluidity_ingress",
            "stream_idle_timeout": STREAM_IDLE_TIMEOUT,
            "route_config": {
                "name": "engine",
                "virtual_hosts": [
                    {
                        "name": "engine",
                        "domains": ["*"],
                        "routes": [{"match": {"prefix": "/"}, "route": route}],
                    }
                ],
            },
            "http_filters": [
                ext_proc_filter(),
                {"name": "envoy.filters.http.router", "typed_config": {"@type": _ROUTER}},
            ],
        },
    }


def bootstrap(upstream: Upstream, listen: Endpoint, observer: Endpoint, admin: Endpoint) -> dict[str, Any]:
    """The whole bootstrap: one listener, the engine's cluster and the observer's, the admin address."""
    listener = {
        "name": "fluidity_ingress",
        "address": _socket_address(listen),
        "filter_chains": [{"filters": [_connection_manager(upstream)]}],
    }
    return {
        "admin": {"address": _socket_address(admin)},
        "static_resources": {
            "listeners": [listener],
            "clusters": [_upstream_cluster(upstream), _observer_cluster(observer)],
        },
    }


def render(document: dict[str, Any]) -> str:
    """The bootstrap as YAML, keys in the order they were built (the order Envoy's docs use)."""
    header = "# Envoy bootstrap written by `fluidity-exporter envoy-config`: an ext_proc observer, never on the data path.\n"
    return header + yaml.safe_dump(document, sort_keys=False)
