# Session 18, call 6 (one H200): the CUDA reference check with the e4m3 KV cache on the final
# engine code (CHECKS=fp8kv NPS=1: fp16/bf16 and the fp8 cache against HF, the prefix-hit path;
# call 4 ran CHECKS=wquant on the same engine code).
set -u
source benchmarks/node_call.sh
node_build llama2 llama2_reference_test llama2_gpu_tests
ref_check fp8kv
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
