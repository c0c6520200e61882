# Session 13, call 3: batch-1 A/B matrix: early PDL trigger (build A on, build B off) x L2 prefetch budget x fused norms; b64/b32 decode kernel.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/all.tgz.tmp -C $O . 2>/dev/null && mv $OUT/all.tgz.tmp $OUT/all.tgz; }
{ date -u; git log -1 --format='%h %s'; git status --short | head; nvidia-smi -L; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 200 bash tests/gpu/node_build.sh llama2_gpu_tests llama2_bench_e2e > $O/build.log 2>&1
echo "build A (trigger on) rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
( cmake -S . -B build-gpu-nt -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA2_WERROR=ON -DLLAMA2_PDL_TRIGGER=OFF >/dev/null && nice -n 19 ninja -j 8 -C build-gpu-nt llama2_bench_e2e 2>&1 | grep -vE "^\[[0-9]+/" ) > $O/build_nt.log 2>&1 &
BPID=$!
timeout 60 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc="gemv*" > $O/gpu_tests.log 2>&1
echo "gpu tests gemv* rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' $O/gpu_tests.log | tr '\n' ' ') $((SECONDS-t0)) s" >> $O/env.txt; pack
mpi() { timeout ${TL:-90} mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "$@"; }
# e2e BUILD NAME "ENV..." ARGS...
e2e() { local b=$1 name=$2 envs=$3; shift 3; mpi -np 1 $envs $b/llama2_bench_e2e --synthetic 7b --prompt-len 128 --prefill-lens "" --decode-steps 64 --repeats 3 "$@" > $O/$name.log 2>&1; echo "$name: $(grep -m1 -E 'batch +[0-9]+:' $O/$name.log | sed 's/ median of 3//') $((SECONDS-t0)) s" >> $O/env.txt; }
for wd in auto fp8; do
  for pf in 0 2048 24576; do
    for f in 0 1; do e2e build-gpu A_${wd}_pf${pf}_fuse$f "-x LLAMA2_GEMV_PREFETCH_KB=$pf -x LLAMA2_FUSE_NORM=$f" --weight-dtype $wd --batches 1; done
  done; pack
done
e2e build-gpu A_b64 "" --batches 64
e2e build-gpu A_b64_warp "-x LLAMA2_DECODE_KERNEL=warp" --batches 64
e2e build-gpu A_b32 "" --batches 32
e2e build-gpu A_b32_warp "-x LLAMA2_DECODE_KERNEL=warp" --batches 32
e2e build-gpu A_b16 "" --batches 16
e2e build-gpu A_b16_warp "-x LLAMA2_DECODE_KERNEL=warp" --batches 16
pack
wait $BPID; echo "build B (trigger off) rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
for wd in auto fp8; do
  for pf in 0 24576; do
    for f in 0 1; do e2e build-gpu-nt B_${wd}_pf${pf}_fuse$f "-x LLAMA2_GEMV_PREFETCH_KB=$pf -x LLAMA2_FUSE_NORM=$f" --weight-dtype $wd --batches 1; done
  done; pack
done
e2e build-gpu-nt B_b64 "" --batches 64
e2e build-gpu-nt B_b64_warp "-x LLAMA2_DECODE_KERNEL=warp" --batches 64
e2e build-gpu-nt B_int8 "" --weight-dtype int8 --batches 1
e2e build-gpu A_int8 "" --weight-dtype int8 --batches 1
date -u >> $O/env.txt; pack; cat $O/env.txt
