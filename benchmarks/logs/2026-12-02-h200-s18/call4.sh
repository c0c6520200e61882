# Session 18, call 4 (one H200): (a) why call 2's profiled 2048-token prefill (46.6 ms, eager with
# per-op events, no start-up warm-up) beat the plain ones (49.1-49.2 ms): 7B fp16 prefill 2048, 5
# repeats each, alternating: default, LLAMA2_WARMUP=0, LLAMA2_PDL=0, LLAMA2_OP_PROFILE=1,
# default; (b) the CUDA reference checks on the final tree, np 1: CHECKS=fp8kv (fp16/bf16, the
# e4m3 KV cache, the prefix-hit path) and CHECKS=wquant (fp8 and int8 weights), against HF.
set -u
source benchmarks/node_call.sh
node_build llama2 llama2_reference_test llama2_bench_e2e
e2e p2048_default --batches "" --prefill-lens 2048 --repeats 5
ENVS="-x LLAMA2_WARMUP=0" e2e p2048_warmup0 --batches "" --prefill-lens 2048 --repeats 5
ENVS="-x LLAMA2_PDL=0" e2e p2048_pdl0 --batches "" --prefill-lens 2048 --repeats 5
ENVS="-x LLAMA2_OP_PROFILE=1" e2e p2048_prof --batches "" --prefill-lens 2048 --repeats 5
e2e p2048_default2 --batches "" --prefill-lens 2048 --repeats 5
pack
CHECKS=fp8kv NPS=1 SKIP_BUILD=1 timeout 240 bash tests/reference/gpu_check.sh "$O/fp8kv" >"$O/fp8kv.log" 2>&1
note "fp8kv rc=$?"
grep -E "^(RESULT|NOISE|STEP)" "$O/fp8kv/summary.txt" >>"$O/env.txt"
rm -rf "$O/fp8kv/fixtures"* "$O/fp8kv/logs"
pack
CHECKS=wquant NPS=1 SKIP_BUILD=1 timeout 240 bash tests/reference/gpu_check.sh "$O/wquant" >"$O/wquant.log" 2>&1
note "wquant rc=$?"
grep -E "^(RESULT|NOISE|STEP)" "$O/wquant/summary.txt" >>"$O/env.txt"
rm -rf "$O/wquant/fixtures"* "$O/wquant/logs"
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
