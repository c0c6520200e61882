# shellcheck shell=bash
# Issue 21, fourth call on `nvidia-h200-x2` (prepared in session 17; NOT RUN): the whole CUDA
# reference check at np 2 (CHECKS=all NPS=2: fp32 vs the CPU fixtures, fp16 / bf16 vs HF, the fp8
# KV cache, quantized weights; fixtures and per-run logs removed). Session 15's np 1 runs took
# 24 + 151 + 355 s for logprobs / fp8kv / wquant: if this one is cut off, split it by CHECKS.
set -u
source benchmarks/node_call.sh
node_build llama2 llama2_reference_test llama2_gpu_tests
CHECKS=all NPS=2 SKIP_BUILD=1 timeout 500 bash tests/reference/gpu_check.sh "$O/all" >"$O/all.log" 2>&1
note "gpu_check all np 2 rc=$?"
grep -E "^(RESULT|NOISE|STEP)" "$O/all/summary.txt" >>"$O/env.txt"
rm -rf "$O/all/fixtures"* "$O/all/logs"
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
