"""Small exposition texts in each engine's real names, shapes and label sets (see catalogue.py sources).

Values are chosen so that every expected figure in the tests can be computed by hand.
"""

from __future__ import annotations

# vLLM >= 0.9 (V1): new names and the deprecated duplicates it still exposes next to them; two engine
# cores (data parallelism) that must be summed; success split by finished_reason.
VLLM_V1 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} 3.0
vllm:num_requests_running{engine="1",model_name="llama"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 4.0
vllm:num_requests_waiting{engine="1",model_name="llama"} 1.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="llama"} 0.99
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="llama"} 0.5
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="llama"} 7.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="llama"} 1000.0
vllm:prompt_tokens_total{engine="1",model_name="llama"} 500.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="llama"} 2000.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="llama"} 8.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="llama"} 2.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="llama"} 0.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="llama"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.5",model_name="llama"} 6.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="llama"} 8.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="llama"} 8.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="llama"} 2.4
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.1",model_name="llama"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="0.5",model_name="llama"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="1",le="+Inf",model_name="llama"} 2.0
vllm:time_to_first_token_seconds_count{engine="1",model_name="llama"} 2.0
vllm:time_to_first_token_seconds_sum{engine="1",model_name="llama"} 1.6
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="llama"} 10.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.025",model_name="llama"} 90.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="llama"} 100.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="llama"} 100.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="llama"} 2.0
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{engine="0",le="0.01",model_name="llama"} 1.0
vllm:time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="llama"} 1.0
vllm:time_per_output_token_seconds_count{engine="0",model_name="llama"} 1.0
vllm:time_per_output_token_seconds_sum{engine="0",model_name="llama"} 0.005
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="llama"} 5.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="llama"} 10.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="llama"} 10.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="llama"} 12.0
# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{engine="0",le="0.3",model_name="llama"} 9.0
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="llama"} 10.0
vllm:request_queue_time_seconds_count{engine="0",model_name="llama"} 10.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="llama"} 1.5
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="llama"} 3.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="llama"} 3.0
vllm:iteration_tokens_total_count{engine="0",model_name="llama"} 3.0
vllm:iteration_tokens_total_sum{engine="0",model_name="llama"} 3.0
"""

# vLLM V0 (before 0.9): the old names only, no engine label, _created samples on counters.
VLLM_V0 = """\
# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="llama-2-7b"} 1.0
# HELP vllm:num_requests_swapped Number of requests swapped to CPU.
# TYPE vllm:num_requests_swapped gauge
vllm:num_requests_swapped{model_name="llama-2-7b"} 0.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="llama-2-7b"} 6.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{model_name="llama-2-7b"} 0.875
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{model_name="llama-2-7b"} 42.0
vllm:prompt_tokens_created{model_name="llama-2-7b"} 1.7e+09
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{model_name="llama-2-7b"} 84.0
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.01",model_name="llama-2-7b"} 0.0
vllm:time_per_output_token_seconds_bucket{le="0.025",model_name="llama-2-7b"} 4.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="llama-2-7b"} 4.0
vllm:time_per_output_token_seconds_count{model_name="llama-2-7b"} 4.0
vllm:time_per_output_token_seconds_sum{model_name="llama-2-7b"} 0.08
"""

# SGLang, current collector.py names (prefix sglang:, label model_name plus tp/pp ranks).
SGLANG = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="qwen",tp_rank="0",pp_rank="0"} 162.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="qwen",tp_rank="0",pp_rank="0"} 28.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="qwen",tp_rank="0",pp_rank="0"} 0.28
# HELP sglang:num_retracted_requests_total Total number of retracted requests.
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{model_name="qwen",tp_rank="0",pp_rank="0"} 3.0
# HELP sglang:prompt_tokens_total Number of prefill tokens processed.
# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{model_name="qwen"} 8.128902e+06
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="qwen"} 7.557572e+06
# HELP sglang:num_requests_total Number of requests processed.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="qwen"} 11008.0
# HELP sglang:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang:time_to_first_token_seconds histogram
sglang:time_to_first_token_seconds_sum{model_name="qwen"} 20.0
sglang:time_to_first_token_seconds_bucket{le="0.1",model_name="qwen"} 10.0
sglang:time_to_first_token_seconds_bucket{le="0.2",model_name="qwen"} 30.0
sglang:time_to_first_token_seconds_bucket{le="+Inf",model_name="qwen"} 40.0
sglang:time_to_first_token_seconds_count{model_name="qwen"} 40.0
# HELP sglang:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE sglang:inter_token_latency_seconds histogram
sglang:inter_token_latency_seconds_sum{model_name="qwen"} 1.0
sglang:inter_token_latency_seconds_bucket{le="0.02",model_name="qwen"} 50.0
sglang:inter_token_latency_seconds_bucket{le="+Inf",model_name="qwen"} 50.0
sglang:inter_token_latency_seconds_count{model_name="qwen"} 50.0
# HELP sglang:e2e_request_latency_seconds Histogram of End-to-end request latency in seconds
# TYPE sglang:e2e_request_latency_seconds histogram
sglang:e2e_request_latency_seconds_sum{model_name="qwen"} 30.0
sglang:e2e_request_latency_seconds_bucket{le="1",model_name="qwen"} 10.0
sglang:e2e_request_latency_seconds_bucket{le="+Inf",model_name="qwen"} 20.0
sglang:e2e_request_latency_seconds_count{model_name="qwen"} 20.0
# HELP sglang:queue_time_seconds Histogram of queueing time in seconds.
# TYPE sglang:queue_time_seconds histogram
sglang:queue_time_seconds_sum{model_name="qwen",tp_rank="0",pp_rank="0"} 2.0
sglang:queue_time_seconds_bucket{le="0.0",model_name="qwen",tp_rank="0",pp_rank="0"} 5.0
sglang:queue_time_seconds_bucket{le="0.1",model_name="qwen",tp_rank="0",pp_rank="0"} 15.0
sglang:queue_time_seconds_bucket{le="+Inf",model_name="qwen",tp_rank="0",pp_rank="0"} 20.0
sglang:queue_time_seconds_count{model_name="qwen",tp_rank="0",pp_rank="0"} 20.0
# HELP sglang:func_latency_seconds Function latency in seconds
# TYPE sglang:func_latency_seconds histogram
sglang:func_latency_seconds_sum{name="generate_request"} 4.5
sglang:func_latency_seconds_bucket{le="0.05",name="generate_request"} 14006.0
sglang:func_latency_seconds_bucket{le="+Inf",name="generate_request"} 14007.0
sglang:func_latency_seconds_count{name="generate_request"} 14007.0
"""

# An older SGLang (docs/references/production_metrics.md): time_per_output_token_seconds, no queue one.
SGLANG_OLD = """\
# HELP sglang:num_running_reqs The number of running requests
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
# HELP sglang:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE sglang:time_per_output_token_seconds histogram
sglang:time_per_output_token_seconds_sum{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.3
sglang:time_per_output_token_seconds_bucket{le="0.005",model_name="meta-llama/Llama-3.1-8B-Instruct"} 1.0
sglang:time_per_output_token_seconds_bucket{le="0.05",model_name="meta-llama/Llama-3.1-8B-Instruct"} 11.0
sglang:time_per_output_token_seconds_bucket{le="+Inf",model_name="meta-llama/Llama-3.1-8B-Instruct"} 11.0
sglang:time_per_output_token_seconds_count{model_name="meta-llama/Llama-3.1-8B-Instruct"} 11.0
"""

# TGI through the Rust metrics-exporter-prometheus: counters without _total, no labels, token counts
# only as histograms.
TGI = """\
# TYPE tgi_request_count counter
tgi_request_count 12
# TYPE tgi_request_success counter
tgi_request_success 10
# TYPE tgi_queue_size gauge
tgi_queue_size 3
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 8
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 4096
# TYPE tgi_request_input_length histogram
tgi_request_input_length_bucket{le="100"} 4
tgi_request_input_length_bucket{le="1000"} 10
tgi_request_input_length_bucket{le="+Inf"} 10
tgi_request_input_length_sum 2500
tgi_request_input_length_count 10
# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{le="100"} 2
tgi_request_generated_tokens_bucket{le="1000"} 10
tgi_request_generated_tokens_bucket{le="+Inf"} 10
tgi_request_generated_tokens_sum 3000
tgi_request_generated_tokens_count 10
# TYPE tgi_request_duration histogram
tgi_request_duration_bucket{le="1"} 2
tgi_request_duration_bucket{le="5"} 8
tgi_request_duration_bucket{le="+Inf"} 10
tgi_request_duration_sum 30
tgi_request_duration_count 10
# TYPE tgi_request_queue_duration histogram
tgi_request_queue_duration_bucket{le="0.1"} 10
tgi_request_queue_duration_bucket{le="+Inf"} 10
tgi_request_queue_duration_sum 0.2
tgi_request_queue_duration_count 10
# TYPE tgi_request_mean_time_per_token_duration histogram
tgi_request_mean_time_per_token_duration_bucket{le="0.02"} 5
tgi_request_mean_time_per_token_duration_bucket{le="0.04"} 10
tgi_request_mean_time_per_token_duration_bucket{le="+Inf"} 10
tgi_request_mean_time_per_token_duration_sum 0.25
tgi_request_mean_time_per_token_duration_count 10
"""

# llama.cpp server's to_metrics(): every family has HELP and TYPE; no labels, no histograms.
LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6886
# HELP llamacpp:prompt_seconds_total Prompt process time
# TYPE llamacpp:prompt_seconds_total counter
llamacpp:prompt_seconds_total 2903.63
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 3469
# HELP llamacpp:tokens_predicted_seconds_total Predict process time
# TYPE llamacpp:tokens_predicted_seconds_total counter
llamacpp:tokens_predicted_seconds_total 3544.27
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 3500
# HELP llamacpp:prompt_tokens_seconds Average prompt throughput in tokens/s.
# TYPE llamacpp:prompt_tokens_seconds gauge
llamacpp:prompt_tokens_seconds 2.37151
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s.
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 0.978776
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.125
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
"""

# vLLM >= 0.13 (vllm/v1/metrics/loggers.py): gpu_cache_usage_perc gone since 0.12 and
# time_per_output_token_seconds since 0.13; per-request TPOT in request_time_per_output_token_seconds.
# Counters come without the _total suffix in the TYPE line, as prometheus_client writes them.
VLLM_0_13 = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen3"} 6.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen3"} 2.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="qwen3"} 0.4
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="qwen3"} 1.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens counter
vllm:prompt_tokens_total{engine="0",model_name="qwen3"} 4096.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="qwen3"} 1024.0
# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="qwen3"} 3.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="qwen3"} 1.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="qwen3"} 1.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.25",model_name="qwen3"} 3.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="qwen3"} 4.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="qwen3"} 4.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="qwen3"} 0.8
# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.01",model_name="qwen3"} 500.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="0.025",model_name="qwen3"} 1000.0
vllm:inter_token_latency_seconds_bucket{engine="0",le="+Inf",model_name="qwen3"} 1020.0
vllm:inter_token_latency_seconds_count{engine="0",model_name="qwen3"} 1020.0
vllm:inter_token_latency_seconds_sum{engine="0",model_name="qwen3"} 12.0
# HELP vllm:request_time_per_output_token_seconds Histogram of time_per_output_token_seconds per request.
# TYPE vllm:request_time_per_output_token_seconds histogram
vllm:request_time_per_output_token_seconds_bucket{engine="0",le="0.01",model_name="qwen3"} 1.0
vllm:request_time_per_output_token_seconds_bucket{engine="0",le="0.025",model_name="qwen3"} 4.0
vllm:request_time_per_output_token_seconds_bucket{engine="0",le="+Inf",model_name="qwen3"} 4.0
vllm:request_time_per_output_token_seconds_count{engine="0",model_name="qwen3"} 4.0
vllm:request_time_per_output_token_seconds_sum{engine="0",model_name="qwen3"} 0.06
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="5.0",model_name="qwen3"} 4.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="qwen3"} 4.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="qwen3"} 4.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="qwen3"} 13.0
# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{engine="0",le="0.3",model_name="qwen3"} 4.0
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="qwen3"} 4.0
vllm:request_queue_time_seconds_count{engine="0",model_name="qwen3"} 4.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="qwen3"} 0.2
"""

# SGLang behind its router (or an OpenTelemetry Prometheus pipeline, which cannot keep ":" in names):
# the collector.py families spelt sglang_*.
SGLANG_ROUTER = """\
# HELP sglang_num_running_reqs The number of running requests.
# TYPE sglang_num_running_reqs gauge
sglang_num_running_reqs{model_name="qwen"} 12.0
# HELP sglang_num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang_num_queue_reqs gauge
sglang_num_queue_reqs{model_name="qwen"} 5.0
# HELP sglang_token_usage The token usage.
# TYPE sglang_token_usage gauge
sglang_token_usage{model_name="qwen"} 0.5
# HELP sglang_num_requests_total Number of requests processed.
# TYPE sglang_num_requests_total counter
sglang_num_requests_total{model_name="qwen"} 300.0
# HELP sglang_generation_tokens_total Number of generation tokens processed.
# TYPE sglang_generation_tokens_total counter
sglang_generation_tokens_total{model_name="qwen"} 9000.0
# HELP sglang_time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE sglang_time_to_first_token_seconds histogram
sglang_time_to_first_token_seconds_sum{model_name="qwen"} 6.0
sglang_time_to_first_token_seconds_bucket{le="0.1",model_name="qwen"} 10.0
sglang_time_to_first_token_seconds_bucket{le="0.2",model_name="qwen"} 30.0
sglang_time_to_first_token_seconds_bucket{le="+Inf",model_name="qwen"} 30.0
sglang_time_to_first_token_seconds_count{model_name="qwen"} 30.0
# HELP sglang_inter_token_latency_seconds Histogram of inter-token latency in seconds.
# TYPE sglang_inter_token_latency_seconds histogram
sglang_inter_token_latency_seconds_sum{model_name="qwen"} 3.0
sglang_inter_token_latency_seconds_bucket{le="0.02",model_name="qwen"} 150.0
sglang_inter_token_latency_seconds_bucket{le="+Inf",model_name="qwen"} 150.0
sglang_inter_token_latency_seconds_count{model_name="qwen"} 150.0
"""

# llm-d's endpoint picker (the Gateway API inference extension's EPP), llm_d_router_metrics.go: labels
# model_name, target_model_name, fairness_id, priority (+ streaming on TTFT); the deprecated
# inference_objective_* twins still emitted beside them (dual emission) with other values, so a test
# can tell which one was read. Only streaming="true" TTFT counts (non-streaming TTFT = whole duration).
LLM_D_EPP = """\
# HELP llm_d_epp_request_total [ALPHA] Total number of processed requests.
# TYPE llm_d_epp_request_total counter
llm_d_epp_request_total{fairness_id="a",model_name="llama",priority="0",target_model_name="llama"} 90
llm_d_epp_request_total{fairness_id="b",model_name="llama",priority="0",target_model_name="llama"} 10
# HELP inference_objective_request_total [ALPHA] [Deprecated: Use llm_d_epp_request_total] Counter.
# TYPE inference_objective_request_total counter
inference_objective_request_total{model_name="llama",priority="0",target_model_name="llama"} 999
# HELP llm_d_epp_request_error_total [ALPHA] Total number of request errors.
# TYPE llm_d_epp_request_error_total counter
llm_d_epp_request_error_total{error_code="Internal",fairness_id="a",model_name="llama",priority="0",target_model_name="llama"} 3
# HELP llm_d_epp_request_running [ALPHA] Current number of active running requests.
# TYPE llm_d_epp_request_running gauge
llm_d_epp_request_running{fairness_id="a",model_name="llama",priority="0",target_model_name="llama"} 7
# HELP llm_d_epp_request_slo_violation_total [ALPHA] Counter of SLO violations for each model, target model, and violation type.
# TYPE llm_d_epp_request_slo_violation_total counter
llm_d_epp_request_slo_violation_total{model_name="llama",plugin_name="pl",plugin_type="predicted-latency",target_model_name="llama",type="ttft"} 4
llm_d_epp_request_slo_violation_total{model_name="llama",plugin_name="pl",plugin_type="predicted-latency",target_model_name="llama",type="tpot"} 2
# HELP llm_d_epp_request_ttft_seconds [ALPHA] Time to first token in seconds, measured from request received to first response byte.
# TYPE llm_d_epp_request_ttft_seconds histogram
llm_d_epp_request_ttft_seconds_bucket{fairness_id="a",model_name="llama",priority="0",streaming="true",target_model_name="llama",le="0.1"} 20
llm_d_epp_request_ttft_seconds_bucket{fairness_id="a",model_name="llama",priority="0",streaming="true",target_model_name="llama",le="0.2"} 60
llm_d_epp_request_ttft_seconds_bucket{fairness_id="a",model_name="llama",priority="0",streaming="true",target_model_name="llama",le="+Inf"} 80
llm_d_epp_request_ttft_seconds_sum{fairness_id="a",model_name="llama",priority="0",streaming="true",target_model_name="llama"} 12
llm_d_epp_request_ttft_seconds_count{fairness_id="a",model_name="llama",priority="0",streaming="true",target_model_name="llama"} 80
llm_d_epp_request_ttft_seconds_bucket{fairness_id="a",model_name="llama",priority="0",streaming="false",target_model_name="llama",le="0.1"} 0
llm_d_epp_request_ttft_seconds_bucket{fairness_id="a",model_name="llama",priority="0",streaming="false",target_model_name="llama",le="0.2"} 0
llm_d_epp_request_ttft_seconds_bucket{fairness_id="a",model_name="llama",priority="0",streaming="false",target_model_name="llama",le="+Inf"} 20
llm_d_epp_request_ttft_seconds_sum{fairness_id="a",model_name="llama",priority="0",streaming="false",target_model_name="llama"} 100
llm_d_epp_request_ttft_seconds_count{fairness_id="a",model_name="llama",priority="0",streaming="false",target_model_name="llama"} 20
# HELP llm_d_epp_request_streaming_itl_seconds [ALPHA] Inter-token latency in seconds for streaming requests.
# TYPE llm_d_epp_request_streaming_itl_seconds histogram
llm_d_epp_request_streaming_itl_seconds_bucket{fairness_id="a",model_name="llama",priority="0",target_model_name="llama",le="0.02"} 4000
llm_d_epp_request_streaming_itl_seconds_bucket{fairness_id="a",model_name="llama",priority="0",target_model_name="llama",le="0.04"} 8000
llm_d_epp_request_streaming_itl_seconds_bucket{fairness_id="a",model_name="llama",priority="0",target_model_name="llama",le="+Inf"} 8000
llm_d_epp_request_streaming_itl_seconds_sum{fairness_id="a",model_name="llama",priority="0",target_model_name="llama"} 200
llm_d_epp_request_streaming_itl_seconds_count{fairness_id="a",model_name="llama",priority="0",target_model_name="llama"} 8000
# HELP llm_d_epp_request_streaming_tpot_seconds [ALPHA] Average time per output token in seconds for streaming requests, computed as (e2e - TTFT) / (output_tokens - 1).
# TYPE llm_d_epp_request_streaming_tpot_seconds histogram
llm_d_epp_request_streaming_tpot_seconds_bucket{fairness_id="a",model_name="llama",priority="0",target_model_name="llama",le="0.02"} 40
llm_d_epp_request_streaming_tpot_seconds_bucket{fairness_id="a",model_name="llama",priority="0",target_model_name="llama",le="0.04"} 80
llm_d_epp_request_streaming_tpot_seconds_bucket{fairness_id="a",model_name="llama",priority="0",target_model_name="llama",le="+Inf"} 80
llm_d_epp_request_streaming_tpot_seconds_sum{fairness_id="a",model_name="llama",priority="0",target_model_name="llama"} 2
llm_d_epp_request_streaming_tpot_seconds_count{fairness_id="a",model_name="llama",priority="0",target_model_name="llama"} 80
# HELP llm_d_epp_request_duration_seconds [ALPHA] End-to-end request latency distribution in seconds.
# TYPE llm_d_epp_request_duration_seconds histogram
llm_d_epp_request_duration_seconds_bucket{fairness_id="a",model_name="llama",priority="0",target_model_name="llama",le="5"} 50
llm_d_epp_request_duration_seconds_bucket{fairness_id="a",model_name="llama",priority="0",target_model_name="llama",le="10"} 100
llm_d_epp_request_duration_seconds_bucket{fairness_id="a",model_name="llama",priority="0",target_model_name="llama",le="+Inf"} 100
llm_d_epp_request_duration_seconds_sum{fairness_id="a",model_name="llama",priority="0",target_model_name="llama"} 600
llm_d_epp_request_duration_seconds_count{fairness_id="a",model_name="llama",priority="0",target_model_name="llama"} 100
# HELP llm_d_epp_average_kv_cache_utilization [ALPHA] The average kv cache utilization for an inference server pool.
# TYPE llm_d_epp_average_kv_cache_utilization gauge
llm_d_epp_average_kv_cache_utilization{name="pool"} 0.3
"""

# The same endpoint picker before the llm_d_epp_ prefix: only the inference_objective_ names.
INFERENCE_OBJECTIVE = """\
# HELP inference_objective_request_total [ALPHA] Counter of inference objective requests.
# TYPE inference_objective_request_total counter
inference_objective_request_total{model_name="llama",target_model_name="llama"} 40
# HELP inference_objective_request_duration_seconds [ALPHA] Inference objective response latency distribution in seconds.
# TYPE inference_objective_request_duration_seconds histogram
inference_objective_request_duration_seconds_bucket{model_name="llama",target_model_name="llama",le="1"} 10
inference_objective_request_duration_seconds_bucket{model_name="llama",target_model_name="llama",le="+Inf"} 40
inference_objective_request_duration_seconds_sum{model_name="llama",target_model_name="llama"} 80
inference_objective_request_duration_seconds_count{model_name="llama",target_model_name="llama"} 40
"""
