# shellcheck shell=bash
# Prepared on branch s17-skinny-8warps (session 17; NOT RUN: the device budget was spent): the
# skinny GEMM with eight-warp blocks (warps_k 4: one k16 step a warp per stage, one block per
# multiprocessor by registers) against the four-warp ones, in its kernel test (both) and in
# `llama2_bench_kernels skinny` (the "8 warps" columns). The question: does doubling the warps
# issuing mma.sync per block bring the 64-row products to the weights' roofline (call 3 of main:
# 7B qkv 34.1 us vs cuBLAS 29.3 at 64 rows; ~1,230 cycles a stage per block against ~790 to
# stream it)? Run on the one-GPU node from the branch's tree: `bash <this file>`.
set -u
source benchmarks/node_call.sh
node_build llama2_gpu_tests llama2_bench_kernels
gpu_tests '*skinny*'
timeout 150 build-gpu/llama2_bench_kernels skinny >"$O/bench_skinny.log" 2>&1
note "bench skinny rc=$?"
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"; cat "$O/bench_skinny.log"
