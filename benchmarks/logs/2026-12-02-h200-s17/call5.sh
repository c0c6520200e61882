# Session 17, call 5: the final tree with LLAMA2_SKINNY_ROWS=16 as the default: the skinny GEMM's
# kernel tests (planner expectation fixed), the CUDA reference check whose fp16 runs take the
# skinny GEMM for o and down at 2-8 rows (CHECKS=fp8kv: fp16/bf16 with the e4m3 KV cache vs HF, np
# 1), and 7B fp16 batches 2-16 with the default against LLAMA2_SKINNY_ROWS=0, one round.
set -u
source benchmarks/node_call.sh
node_build llama2 llama2_gpu_tests llama2_reference_test llama2_bench_e2e
timeout 90 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc='*skinny*' >"$O/gpu_tests.log" 2>&1
note "tc skinny rc=$? $(tail -3 "$O/gpu_tests.log" | grep -E 'test cases|assertions' | tr '\n' ' ')"
grep -E -A6 "ERROR|FAILED" "$O/gpu_tests.log" | head -30 >>"$O/env.txt"
pack
CHECKS=fp8kv NPS=1 SKIP_BUILD=1 timeout 240 bash tests/reference/gpu_check.sh "$O/fp8kv" >"$O/fp8kv.log" 2>&1
note "fp8kv rc=$?"
grep -E "^(RESULT|NOISE|STEP)" "$O/fp8kv/summary.txt" >>"$O/env.txt"
rm -rf "$O/fp8kv/fixtures"* "$O/fp8kv/logs"
pack
e2e fp16_default --batches 2,4,8,16 --prefill-lens ""
ENVS="-x LLAMA2_SKINNY_ROWS=0" e2e fp16_skinny0 --batches 2,4,8,16 --prefill-lens ""
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
