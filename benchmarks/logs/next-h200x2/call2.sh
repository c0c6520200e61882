# shellcheck shell=bash
# Issue 21, second call on `nvidia-h200-x2` (prepared in session 17; NOT RUN). About 8-9 minutes:
#   - saturation, 7B synthetic fp16, 1024 requests of 128 + 128 at once: TP 1 (-np 1), TP 2
#     (-np 2), DP 2 (-np 2 --tp 1: two one-GPU replicas behind one endpoint), each a fresh server
#     (the issue's DP2 >= 1.9x TP1 row);
#   - the CUDA reference check at np 2 with the fp8 KV cache (CHECKS=fp8kv NPS=2; the whole
#     CHECKS=all run needs a call of its own);
#   - llama2_watchdog_test stall and kill with BACKEND cuda (rank 1 SIGSTOPped / SIGKILLed at TP 2).
set -u
source benchmarks/node_call.sh
node_build llama2 llama2_reference_test llama2_gpu_tests llama2_watchdog_test
sat sat_tp1 LLAMA2_MIXED_DECODE 1
NP=2 sat sat_tp2 LLAMA2_MIXED_DECODE 1
NP=2 SERVE_ARGS="--tp 1" sat sat_dp2 LLAMA2_MIXED_DECODE 1
CHECKS=fp8kv NPS=2 SKIP_BUILD=1 timeout 300 bash tests/reference/gpu_check.sh "$O/fp8kv" >"$O/fp8kv.log" 2>&1
note "gpu_check fp8kv np 2 rc=$?"
grep -E "^(RESULT|NOISE|STEP)" "$O/fp8kv/summary.txt" >>"$O/env.txt"
rm -rf "$O/fp8kv/fixtures"* "$O/fp8kv/logs"
# Reliability at TP 2 on CUDA: rank 1 SIGSTOPped (the step watchdog) and SIGKILLed (the exited-rank
# check) mid-stream; every client answered, socket removed, job gone in bounded time.
for c in stall kill; do
  LLAMA2_TEST_TIMEOUT=150 timeout 180 build-gpu/tests/llama2_watchdog_test build-gpu/llama2 \
    tests/models/small-d128-f16 tests/integration/mpirun.sh "$c" cuda >"$O/watchdog_$c.log" 2>&1
  note "watchdog $c cuda rc=$? $(tail -1 "$O/watchdog_$c.log")"
done
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
