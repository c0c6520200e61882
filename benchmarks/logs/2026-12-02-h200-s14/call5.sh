# Session 14, call 5: block_sum/block_max as block_reduce<kMax> (a refactor): the kernels that use it, and one e2e run.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/r; mkdir -p $O
{ date -u; git log --oneline -1; nvidia-smi -L; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 150 bash tests/gpu/node_build.sh llama2_gpu_tests llama2_bench_e2e > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" >> $O/env.txt
timeout 40 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc='*rmsnorm*,*RMSNorm*,quantize_rows*,fp8 fused*,Fp8Gemm*' > $O/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' $O/gpu_tests.log | tr '\n' ' ') $((SECONDS-t0)) s" >> $O/env.txt
grep -B2 -A12 "ERROR\|FAILED" $O/gpu_tests.log | head -30 >> $O/env.txt
timeout 30 mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -np 1 build-gpu/llama2_bench_e2e --synthetic 7b --weight-dtype fp8 --prompt-len 128 --decode-steps 64 --repeats 3 --batches 64 --prefill-lens "" > $O/fp8_b64.log 2>&1
echo "fp8_b64 rc=$? $(grep -E 'batch +[0-9]+:' $O/fp8_b64.log) $((SECONDS-t0)) s" >> $O/env.txt
date -u >> $O/env.txt; cat $O/env.txt
