# Session 16, call 6 (prepared, NOT RUN: the device budget ran out; first call of the next session):
# the fused one-shot all-reduce + add + RMSNorm's kernel tests (two and three "ranks" as streams of
# one GPU) and the add_rmsnorm / rmsnorm cases it must equal.
set -u
source benchmarks/node_call.sh
node_build llama2_gpu_tests
gpu_tests '*all-reduce*,add_rmsnorm*,rmsnorm*'
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
