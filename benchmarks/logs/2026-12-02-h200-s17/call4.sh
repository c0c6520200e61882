# Session 17, call 4: the skinny GEMM routed only to the narrow products (o, down) of 2-32 rows,
# the planner refitted to call 3's forced-split timings (at most 6 splits, 1.5 blocks per SM):
# its kernel tests, `llama2_bench_kernels skinny` again, and 7B fp16 decode at batches 2-32 with
# LLAMA2_SKINNY_ROWS=32 against 0 (cuBLAS), alternating, two rounds.
set -u
source benchmarks/node_call.sh
node_build llama2_gpu_tests llama2_bench_kernels llama2_bench_e2e
timeout 90 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc='*skinny*' >"$O/gpu_tests.log" 2>&1
note "tc skinny rc=$? $(tail -3 "$O/gpu_tests.log" | grep -E 'test cases|assertions' | tr '\n' ' ')"
grep -E -A6 "ERROR|FAILED" "$O/gpu_tests.log" | head -30 >>"$O/env.txt"
pack
timeout 150 build-gpu/llama2_bench_kernels skinny >"$O/bench_skinny.log" 2>&1
note "bench skinny rc=$?"; pack
for round in 1 2; do
  for rows in 0 32; do
    ENVS="-x LLAMA2_SKINNY_ROWS=$rows" e2e "fp16_skinny${rows}_$round" --batches 2,4,8,16,32 --prefill-lens ""
  done
done
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
