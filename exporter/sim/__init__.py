"""The built-in simulated OpenAI-compatible inference engine (``fluidity-exporter sim``).

A real aiohttp server whose timing comes from an iteration-level engine model (continuous batching,
paged KV cache with preemption, chunked or whole prefills, optional speculative decoding) driven by a
step-time cost model, with presets calibrated to public figures. It is the default target of the daemon
and the test bed of every measurement in this project: its truth is known.

Embedding::

    server = SimServer(SimConfig(preset="tiny"))
    host, port = await server.start("127.0.0.1", 0)
    ...
    await server.stop()

Standard request fields honoured: ``model``, ``prompt`` (string, one-element list, or token ids) /
``messages``, ``max_tokens`` (``max_completion_tokens``), ``min_tokens``, ``ignore_eos``,
``temperature`` (validated; the output does not depend on it), ``seed`` (the generated text),
``stream``, ``stream_options.include_usage``,
``stream_options.continuous_usage_stats`` (needs ``include_usage``, as in vLLM), ``return_token_ids``.

Request extension fields (all optional, under ``"sim"``):

``"sim": {"script": {...}}``
    Bypass the engine and stream on an exact timetable. ``ttft`` (s, default 0): first chunk after the
    request arrived; ``gaps`` (s or list of s, default 0.01; ``gap`` is an alias): time between chunk
    ``i-1`` and ``i``, the last value repeating; ``chunk_sizes`` (int or list, default 1): tokens per
    chunk, the last value repeating; ``stalls`` (``{"40": 2.0}``): extra delay before the chunk holding
    that 0-based token index. The number of tokens is ``max_tokens`` (default ``default_max_tokens``).
``"sim": {"fault": "MODE"}`` or ``{"fault": {"mode": ..., "at": 3, "duration": 3600, "size": 1048576,
"interval": 0.005}}``
    Inject a fault into this response; modes and parameters are listed in ``exporter.sim.faults``.
"""

from exporter.sim.config import SimConfig
from exporter.sim.server import SimServer

__all__ = ["SimConfig", "SimServer"]
