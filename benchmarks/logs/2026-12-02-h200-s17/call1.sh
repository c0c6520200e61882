# Session 17, call 1: session 16's call 6, not run then: the fused one-shot all-reduce + add +
# RMSNorm kernel tests (two and three "ranks" as streams of one GPU) and the add_rmsnorm /
# rmsnorm cases it must equal.
set -u
source benchmarks/node_call.sh
node_build llama2_gpu_tests
gpu_tests '*all-reduce*,add_rmsnorm*,rmsnorm*'
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
