"""Fluidity Exporter: continuous Etalon fluidity-index and latency monitoring for LLM inference servers."""

__version__ = "0.1.0"
