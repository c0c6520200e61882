# Session 16, call 2 (tree s16-fp8-bf16-sums 61225ff: main cb64dc6 + the bf16 sums + the test bound
# that counts their rounding): the fp8 GPU tests, CHECKS=wquant reference check, eager op profiles
# of 7B fp16 / fp8 at batch 64 (where the step goes beyond the weight and KV bytes).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source launch/env.sh >/dev/null 2>&1
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/all.tgz.tmp -C $O . 2>/dev/null && mv $OUT/all.tgz.tmp $OUT/all.tgz; }
{ date -u; git log --oneline -1; git status --short | head; nvidia-smi -L; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 240 bash tests/gpu/node_build.sh llama2 llama2_gpu_tests llama2_bench_e2e llama2_reference_test > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
timeout 120 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc='Fp8Gemm*,fp8*,*quant*,gemv*' > $O/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' $O/gpu_tests.log | tr '\n' ' ') $((SECONDS-t0)) s" >> $O/env.txt
grep -B2 -A12 "ERROR\|FAILED" $O/gpu_tests.log | head -40 >> $O/env.txt; pack
mpi() { timeout ${TL:-120} mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "$@"; }
for W in auto fp8; do
  for B in 1 64; do
    mpi -np 1 -x LLAMA2_OP_PROFILE=1 build-gpu/llama2_bench_e2e --synthetic 7b --weight-dtype $W --batches $B --prompt-len 128 --decode-steps 3 --warmup 1 --repeats 1 --prefill-lens "" > $O/prof.log 2>&1
    echo "prof $W b$B: $(grep op-profile $O/prof.log | tail -1) $((SECONDS-t0)) s" >> $O/env.txt
  done
done
rm -f $O/prof.log; pack
CHECKS=wquant NPS=1 SKIP_BUILD=1 timeout 330 bash tests/reference/gpu_check.sh $O/wquant > $O/wquant.log 2>&1
echo "wquant rc=$? $((SECONDS-t0)) s" >> $O/env.txt
grep -E "^(RESULT|STEP)" $O/wquant/summary.txt >> $O/env.txt; rm -rf $O/wquant/fixtures* $O/wquant/logs
date -u >> $O/env.txt; pack; cat $O/env.txt
