"""The observer of real traffic: Envoy's external processing filter (``ext_proc``) in observability
mode sends each user request's headers and body chunks here as they pass, and the observer computes per
request what the probes compute for their own (TTFT, gaps, fluidity-index per decode tier).

- ``envoy_config``: the Envoy bootstrap that puts the filter in front of an engine (pure data).
- ``_proto``: the generated ext_proc gRPC code (``scripts/ext_proc_protos.py`` regenerates it).
- ``observer``: the gRPC server, one ``Process`` stream per HTTP request; it only stamps chunks.
- ``record``: a stream's stamped chunks decoded into the probe's result type, with the probe's decoder.

Layer: beside ``load``, above ``probe``, because it imports the probe's stream decoder (``probe.sse``,
``probe.chunk_shapes``, ``probe.openai``). The decoder moves below both later (issue 38), and then this
package sits beside ``probe``.
"""
