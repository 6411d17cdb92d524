"""Pure metric math (numpy and the standard library only, no I/O).

Etalon's fluidity-index and fluid token generation rate, the conventional latency metrics, the prefill
deadline model and SLO/goodput evaluation. Every function takes recorded timings and returns numbers;
nothing here reads a clock, a socket or a file other than the ones it is handed.
"""
