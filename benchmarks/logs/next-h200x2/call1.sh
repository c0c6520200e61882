# shellcheck shell=bash
# Issue 21, first call on `nvidia-h200-x2` (prepared in session 17, 2026-12-02; NOT RUN: the
# two-GPU kind was not lent). Copy into the session's log folder, run as `bash callN.sh` from the
# repository root with kind nvidia-h200-x2. About 6-8 minutes:
#   - the all-reduce kernel tests (streams of one GPU) and the fused form at TP 2 for real;
#   - llama2_bench_allreduce: one-shot vs NCCL, 2 KB - 512 KB, and the fused all-reduce + add +
#     RMSNorm vs the two launches (the "8 KB <= 5 us, NCCL beside it" row);
#   - 7B batch 1-64: TP 1 vs TP 2 with LLAMA2_FUSE_ALLREDUCE_NORM 0 and 1, alternating, two
#     rounds (the 7B TP2 >= 480 tok/s and TP2/TP1 >= 1.6x rows; the fused form's A/B);
#   - 70B batch 1 at TP 2, fp16 and fp8 weights (>= 55 / >= 90 tok/s).
set -u
source benchmarks/node_call.sh
node_build llama2 llama2_gpu_tests llama2_bench_e2e llama2_bench_allreduce
gpu_tests '*all-reduce*'
TL=120 mpi -np 2 build-gpu/llama2_bench_allreduce >"$O/bench_allreduce.log" 2>&1
note "bench allreduce rc=$?"
pack
for round in 1 2; do
  e2e "7b_tp1_$round" --batches 1,8,64 --prefill-lens ""
  for fuse in 0 1; do
    NP=2 ENVS="-x LLAMA2_FUSE_ALLREDUCE_NORM=$fuse" e2e "7b_tp2_fuse${fuse}_$round" \
      --batches 1,8,64 --prefill-lens ""
  done
  pack
done
TL=300 MODEL=70b NP=2 e2e 70b_tp2_fp16 --batches 1,8 --prefill-lens ""
TL=300 MODEL=70b NP=2 e2e 70b_tp2_fp8 --batches 1,8 --prefill-lens "" --weight-dtype fp8
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"; cat "$O/bench_allreduce.log"
