# Session 16, call 6 (main + the fused one-shot all-reduce + add + RMSNorm, uncommitted): its kernel
# tests (two and three "ranks" as streams of one GPU), and the existing add_rmsnorm / elementwise
# cases it must equal.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
source launch/env.sh >/dev/null 2>&1
O=$OUT/r; mkdir -p $O
{ date -u; git log --oneline -1; git status --short | head; nvidia-smi -L; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 200 bash tests/gpu/node_build.sh llama2_gpu_tests > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" >> $O/env.txt
timeout 120 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc='*all-reduce*,add_rmsnorm*,rmsnorm*' > $O/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' $O/gpu_tests.log | tr '\n' ' ') $((SECONDS-t0)) s" >> $O/env.txt
grep -B2 -A12 "ERROR\|FAILED" $O/gpu_tests.log | head -60 >> $O/env.txt
date -u >> $O/env.txt; cat $O/env.txt
