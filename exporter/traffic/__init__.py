"""The observer of real traffic: Envoy's external processing filter (``ext_proc``) in observability
mode sends each user request's headers and body chunks here as they pass, and the observer computes per
request what the probes compute for their own (TTFT, gaps, fluidity-index per decode tier).

- ``envoy_config``: the Envoy bootstrap that puts the filter in front of an engine (pure data).
- ``_proto``: the generated ext_proc gRPC code (``scripts/ext_proc_protos.py`` regenerates it).
- ``observer``: the gRPC server, one ``Process`` stream per HTTP request; it only stamps chunks.
- ``record``: a stream's stamped chunks decoded into the probe's result type, with the probe's decoder.

Layer: beside ``probe``, ``sim`` and ``engine`` (a network-layer source of records), above ``streams``,
whose decoder (``streams.sse``, ``streams.decoder``, ``streams.openai``) the probe client uses too: a
user's stream and a probe's are decoded by the same code.
"""
