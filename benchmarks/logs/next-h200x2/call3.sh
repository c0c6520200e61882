# shellcheck shell=bash
# Issue 21, third call on `nvidia-h200-x2` (prepared in session 17; NOT RUN): the serve soak at TP 2
# on CUDA, 10,000 requests, each rank's RSS, descriptors and device memory at 1,000 and at the end
# (the issue's "no growth" row). node_reliability.sh gives the TP 1 soak 400 s.
set -u
source benchmarks/node_call.sh
node_build llama2 llama2_serve_soak
LLAMA2_TEST_TIMEOUT=400 timeout 430 build-gpu/tests/llama2_serve_soak build-gpu/llama2 models/docs-8m \
  tests/integration/mpirun.sh --np 2 --backend cuda --record "$O/soak_tp2.txt" >"$O/soak_tp2.log" 2>&1
note "soak tp2 cuda rc=$? $(tail -2 "$O/soak_tp2.log" | tr '\n' ' ')"
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
