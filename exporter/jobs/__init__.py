"""Long jobs run on demand: prefill profiling (and, next, capacity search)."""
