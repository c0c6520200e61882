# Session 13, call 5: where the W8A16 GEMM stops paying for int8 (LLAMA2_W8A16_ROWS), 7B batch 32 / 128.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/all.tgz.tmp -C $O . 2>/dev/null && mv $OUT/all.tgz.tmp $OUT/all.tgz; }
{ date -u; nvidia-smi -L; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 200 bash tests/gpu/node_build.sh llama2_bench_e2e > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
mpi() { timeout ${TL:-90} mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "$@"; }
e2e() { local name=$1 envs=$2; shift 2; mpi -np 1 $envs build-gpu/llama2_bench_e2e --synthetic 7b --prompt-len 128 --prefill-lens "" --decode-steps 64 --repeats 3 "$@" > $O/$name.log 2>&1; echo "$name: $(grep -m1 -E 'batch +[0-9]+:' $O/$name.log | sed 's/ median of 3//') $((SECONDS-t0)) s" >> $O/env.txt; pack; }
e2e int8_b32 "" --weight-dtype int8 --batches 32
e2e int8_b32_rows0 "-x LLAMA2_W8A16_ROWS=0" --weight-dtype int8 --batches 32
e2e int8_b128_rows64 "" --weight-dtype int8 --batches 128
e2e int8_b128_rows128 "-x LLAMA2_W8A16_ROWS=128" --weight-dtype int8 --batches 128
e2e fp16_b128 "" --batches 128
e2e int8_prefill "" --weight-dtype int8 --batches "" --prefill-lens 2048
e2e fp16_prefill "" --batches "" --prefill-lens 2048
date -u >> $O/env.txt; pack; cat $O/env.txt
