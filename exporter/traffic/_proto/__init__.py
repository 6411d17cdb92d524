"""Envoy's ext_proc messages and service, generated from proto/ (see proto/README.md)."""
