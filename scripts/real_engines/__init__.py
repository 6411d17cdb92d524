"""Real inference engines on this machine, no GPU and no model download: llama.cpp and vLLM (CPU).

Each engine is set up from nothing (built or installed, with a random-weight model written for it) into
a cache folder outside the clone, ``~/.cache/fluidity-exporter/engines/<engine>-<version>/``, once per
version; a second set-up takes well under a second. ``python -m scripts.real_engines`` sets them up,
starts and stops them on 127.0.0.1; the ``real_engine`` tests (``tests/real_engine``) use the same code.
"""
