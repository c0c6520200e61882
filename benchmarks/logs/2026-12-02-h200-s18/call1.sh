# Session 18, call 1 (one H200): (a) the skinny GEMM's kernel tests after its launch moved to
# launch_kernel_in_clusters (every kernel's launch goes through it now) and with eight-warp blocks
# (warps_k 4) as an A/B; `llama2_bench_kernels skinny` with the "8 warps" columns; (b) where a
# prefix hit's 6.2 ms go: prefix_ttft.sh with the server's per-op profile (LLAMA2_OP_PROFILE=1,
# eager steps: the TTFTs of this run are not the figures); (c) 7B fp16 batch 1 and 16 as a check of
# the launch helper change against session 17 (261.5 / 3,386 tok/s).
set -u
source benchmarks/node_call.sh
node_build llama2 llama2_gpu_tests llama2_bench_kernels llama2_bench_e2e
timeout 120 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc='*skinny*' >"$O/gpu_tests.log" 2>&1
note "tc skinny rc=$? $(tail -3 "$O/gpu_tests.log" | grep -E 'test cases|assertions' | tr '\n' ' ')"
grep -E -A6 "ERROR|FAILED" "$O/gpu_tests.log" | head -30 >>"$O/env.txt"
pack
e2e fp16_b1_b16 --batches 1,16 --prefill-lens ""
pack
timeout 200 build-gpu/llama2_bench_kernels skinny >"$O/bench_skinny.log" 2>&1
note "bench skinny rc=$?"
pack
SKIP_BUILD=1 TRIALS=4 SERVE_ENV="-x LLAMA2_OP_PROFILE=1" timeout 240 \
  bash benchmarks/prefix/prefix_ttft.sh "$O/prefix_prof" >"$O/prefix_prof.txt" 2>&1
note "prefix profile rc=$? $(grep -c op-profile "$O/prefix_prof/on.server.log") op-profile lines"
grep -E "tokens (32|1056) " "$O/prefix_prof/on.server.log" | head -12 >>"$O/env.txt"
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
