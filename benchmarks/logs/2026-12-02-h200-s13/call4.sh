# Session 13, call 4 (final): the shipped defaults (trigger off, fusion off, prefetch 0, W8A16 up to 64 rows in 32-row tiles).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/all.tgz.tmp -C $O . 2>/dev/null && mv $OUT/all.tgz.tmp $OUT/all.tgz; }
{ date -u; git status --short | head; nvidia-smi -L; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 240 bash tests/gpu/node_build.sh llama2 llama2_gpu_tests llama2_bench_e2e llama2_reference_test > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
timeout 170 build-gpu/tests/llama2_gpu_tests --force-colors=0 > $O/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' $O/gpu_tests.log | tr '\n' ' ') $((SECONDS-t0)) s" >> $O/env.txt
grep -B2 -A12 "ERROR\|FAILED" $O/gpu_tests.log | head -40 >> $O/env.txt; pack
mpi() { timeout ${TL:-90} mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "$@"; }
e2e() { local name=$1 envs=$2; shift 2; mpi -np 1 $envs build-gpu/llama2_bench_e2e --synthetic 7b --prompt-len 128 --prefill-lens "" --decode-steps 64 --repeats 3 "$@" > $O/$name.log 2>&1; echo "$name: $(grep -m1 -E 'batch +[0-9]+:' $O/$name.log | sed 's/ median of 3//') $((SECONDS-t0)) s" >> $O/env.txt; }
e2e int8_b64 "" --weight-dtype int8 --batches 64
e2e int8_b64_rows0 "-x LLAMA2_W8A16_ROWS=0" --weight-dtype int8 --batches 64
e2e int8_b16 "" --weight-dtype int8 --batches 16
e2e int8_b16_rows0 "-x LLAMA2_W8A16_ROWS=0" --weight-dtype int8 --batches 16
e2e fp16_b1 "" --batches 1
e2e fp8_b1 "" --weight-dtype fp8 --batches 1
e2e int8_b1 "" --weight-dtype int8 --batches 1
e2e fp16_b64 "" --batches 64
e2e fp8_b64 "" --weight-dtype fp8 --batches 64
pack
CHECKS=wquant NPS=1 SKIP_BUILD=1 timeout 330 bash tests/reference/gpu_check.sh $O/wquant > $O/wquant.log 2>&1
echo "wquant rc=$? $((SECONDS-t0)) s" >> $O/env.txt; grep -E "^(RESULT|NOISE|STEP)" $O/wquant/summary.txt >> $O/env.txt; rm -rf $O/wquant/fixtures*; pack
date -u >> $O/env.txt; pack; cat $O/env.txt
