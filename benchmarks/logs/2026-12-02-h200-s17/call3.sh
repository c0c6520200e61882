# Session 17, call 3: the fused all-reduce test with its kernels loaded first (call 2's hang was
# the first launch of add_rmsnorm while rank 0 spun) and the norms' tests after
# add_rmsnorm_row.cuh; the skinny GEMM (kernels/gemm_skinny.cu, new): its kernel test,
# `llama2_bench_kernels skinny` against cuBLAS, and 7B fp16 decode with LLAMA2_SKINNY_ROWS=64
# against 0 (cuBLAS), alternating, two rounds; ncu of the 64-row kernel. Kernel: the 64-column
# warp tiles over half the k16 steps (after 0-skinny-v1's 32-column ones).
set -u
source benchmarks/node_call.sh
node_build llama2_gpu_tests llama2_bench_kernels llama2_bench_e2e
for tc in '*all-reduce*' '*skinny*' 'rmsnorm*,add_rmsnorm*,fp8 fused*,gemv fusions*'; do
  timeout 90 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc="$tc" >>"$O/gpu_tests.log" 2>&1
  note "tc '$tc' rc=$? $(tail -3 "$O/gpu_tests.log" | grep -E 'test cases|assertions' | tr '\n' ' ')"
  grep -E -A6 "HANG|ERROR|FAILED" "$O/gpu_tests.log" | head -40 >>"$O/env.txt"
  pack
done
timeout 150 build-gpu/llama2_bench_kernels skinny >"$O/bench_skinny.log" 2>&1
note "bench skinny rc=$?"; pack
# Where a 64-row tile's time goes: tensor pipe, stalls, DRAM (three launches of the 64-row kernel).
timeout 120 ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
  --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
  -k regex:gemm_skinny_kernel.*Li64 --launch-skip 30 --launch-count 3 \
  build-gpu/llama2_bench_kernels skinny >"$O/ncu_skinny64.txt" 2>&1
note "ncu rc=$?"; pack
for round in 1 2; do
  for rows in 0 64; do
    ENVS="-x LLAMA2_SKINNY_ROWS=$rows" e2e "fp16_skinny${rows}_$round" --batches 2,16,32,64 --prefill-lens ""
  done
done
pack
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"; tail -60 "$O/bench_skinny.log"
