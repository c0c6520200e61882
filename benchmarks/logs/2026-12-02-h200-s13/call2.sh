# Session 13, call 2: batch-1 fusion (norm/residual in the GEMV), PDL early trigger + L2 prefetch, argmax.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/all.tgz.tmp -C $O . 2>/dev/null && mv $OUT/all.tgz.tmp $OUT/all.tgz; }
{ date -u; git rev-parse HEAD; git status --short | head -30; nvidia-smi -L; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 240 bash tests/gpu/node_build.sh llama2 llama2_gpu_tests llama2_bench_e2e > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
timeout 200 build-gpu/tests/llama2_gpu_tests --force-colors=0 > $O/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' $O/gpu_tests.log | tr '\n' ' ') $((SECONDS-t0)) s" >> $O/env.txt
grep -B2 -A12 "ERROR\|FAILED" $O/gpu_tests.log | head -60 >> $O/env.txt; pack
mpi() { timeout ${TL:-90} mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "$@"; }
# Greedy ids with the fused path vs LLAMA2_FUSE_NORM=0 on a random fp16 model: must be identical.
build-gpu/llama2 make-test-model -o /tmp/tm --hidden-size 1024 --intermediate-size 2816 --layers 4 --heads 8 --vocab 2048 --dtype f16 > $O/tm.log 2>&1
for wd in auto fp8 int8; do
  for f in 0 1; do
    mpi -np 1 -x LLAMA2_FUSE_NORM=$f build-gpu/llama2 generate -m /tmp/tm --backend cuda --weight-dtype $wd -p "The quick brown fox" -n 64 --temperature 0 --json > $O/ids_${wd}_$f.json 2>$O/ids_${wd}_$f.err
  done
  python3 -c "import json,sys; a=json.load(open('$O/ids_${wd}_0.json'))['token_ids']; b=json.load(open('$O/ids_${wd}_1.json'))['token_ids']; print('identity $wd:', 'SAME' if a==b else 'DIFFERENT', len(a), len(b))" >> $O/env.txt 2>&1
done; pack
# Batch-1 decode: default (fused, PDL trigger, prefetch) vs LLAMA2_FUSE_NORM=0 vs LLAMA2_PDL=0, 7B fp16 / fp8 / int8.
# e2e NAME "ENV..." ARGS...
e2e() { local name=$1 envs=$2; shift 2; mpi -np 1 $envs build-gpu/llama2_bench_e2e --synthetic 7b --prompt-len 128 --prefill-lens "" --decode-steps 64 --repeats 3 "$@" > $O/$name.log 2>&1; echo "$name: $(grep -m1 -E 'batch +(1|64):' $O/$name.log) $((SECONDS-t0)) s" >> $O/env.txt; pack; }
for wd in auto fp8 int8; do
  e2e b1_${wd} "" --weight-dtype $wd --batches 1
  e2e b1_${wd}_nofuse "-x LLAMA2_FUSE_NORM=0" --weight-dtype $wd --batches 1
done
e2e b1_auto_nopdl "-x LLAMA2_PDL=0" --batches 1
e2e b1_fp8_nopdl "-x LLAMA2_PDL=0" --weight-dtype fp8 --batches 1
# Batch 64: does the early trigger change anything; the warp decode-attention kernel at b64.
e2e b64_auto "" --batches 64
e2e b64_auto_warp "-x LLAMA2_DECODE_KERNEL=warp" --batches 64
e2e b64_fp8 "" --weight-dtype fp8 --batches 64
date -u >> $O/env.txt; pack; cat $O/env.txt
