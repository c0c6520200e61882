# Session 18, call 4 (one H200): (a) why call 2's profiled 2048-token prefill (46.6 ms, eager with
# per-op events, no start-up warm-up) beat the plain ones (49.1-49.2 ms): 7B fp16 prefill 2048, 5
# repeats each, alternating: default, LLAMA2_WARMUP=0, LLAMA2_PDL=0, LLAMA2_OP_PROFILE=1,
# default; (b) the CUDA reference checks on the final tree, np 1: CHECKS=fp8kv (fp16/bf16, the
# e4m3 KV cache, the prefix-hit path) and CHECKS=wquant (fp8 and int8 weights), against HF;
# (c) the attention_prefill kernel tests after their set-up became one helper.
set -u
source benchmarks/node_call.sh
node_build llama2 llama2_reference_test llama2_bench_e2e llama2_gpu_tests
gpu_tests 'attention_prefill*'
e2e p2048_default --batches "" --prefill-lens 2048 --repeats 5
ENVS="-x LLAMA2_WARMUP=0" e2e p2048_warmup0 --batches "" --prefill-lens 2048 --repeats 5
ENVS="-x LLAMA2_PDL=0" e2e p2048_pdl0 --batches "" --prefill-lens 2048 --repeats 5
ENVS="-x LLAMA2_OP_PROFILE=1" e2e p2048_prof --batches "" --prefill-lens 2048 --repeats 5
e2e p2048_default2 --batches "" --prefill-lens 2048 --repeats 5
pack
ref_check fp8kv
ref_check wquant
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
