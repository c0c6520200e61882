# Session 15, call 2: batch-1 A/B of the add+norm GEMV epilogue, the decode "whole" rule (contexts 129-192 and 385-448) and the RoPE epilogue, and serve saturation at max batch 512 vs 1024 (13B fp8 w + fp8 KV; 7B fp8 KV; 7B fp16).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/all.tgz.tmp -C $O . 2>/dev/null && mv $OUT/all.tgz.tmp $OUT/all.tgz; }
{ date -u; git log --oneline -1; git status --short | head; nvidia-smi -L; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 240 bash tests/gpu/node_build.sh llama2 llama2_gpu_tests llama2_bench_e2e > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
timeout 150 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc='*attention*,gemv*,rope*' > $O/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' $O/gpu_tests.log | tr '\n' ' ') $((SECONDS-t0)) s" >> $O/env.txt
grep -B2 -A12 "ERROR\|FAILED" $O/gpu_tests.log | head -60 >> $O/env.txt; pack
mpi() { timeout ${TL:-90} mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "$@"; }
e2e() { local name=$1 envs=$2; shift 2; local t1=$SECONDS; mpi -np 1 $envs build-gpu/llama2_bench_e2e --synthetic 7b --decode-steps 64 --repeats 3 "$@" > $O/$name.log 2>&1; echo "$name: rc=$? $(grep -E 'batch +[0-9]+:|prefill' $O/$name.log | sed 's/ median of 3//' | tr '\n' ' ') [$((SECONDS-t1)) s] $((SECONDS-t0)) s" >> $O/env.txt; }
for r in 1 2; do
for W in fp8 auto int8; do
e2e ${W}_b1_all_$r "" --weight-dtype $W --batches 1 --prompt-len 128 --prefill-lens ""
e2e ${W}_b1_addnorm0_$r "-x LLAMA2_FUSE_ADD_NORM=0" --weight-dtype $W --batches 1 --prompt-len 128 --prefill-lens ""
e2e ${W}_b1_whole0_$r "-x LLAMA2_DECODE_WHOLE=0" --weight-dtype $W --batches 1 --prompt-len 128 --prefill-lens ""
e2e ${W}_b1_none_$r "-x LLAMA2_FUSE_ADD_NORM=0 -x LLAMA2_DECODE_WHOLE=0 -x LLAMA2_FUSE_ROPE=0" --weight-dtype $W --batches 1 --prompt-len 128 --prefill-lens ""
e2e ${W}_b1_p384_all_$r "" --weight-dtype $W --batches 1 --prompt-len 384 --prefill-lens ""
e2e ${W}_b1_p384_whole0_$r "-x LLAMA2_DECODE_WHOLE=0" --weight-dtype $W --batches 1 --prompt-len 384 --prefill-lens ""
done
pack
done
e2e fp8_b16_64 "" --weight-dtype fp8 --batches 16,64 --prompt-len 128 --prefill-lens 2048
sat() { local name=$1; shift; local t1=$SECONDS; env SKIP_BUILD=1 "$@" timeout 200 bash benchmarks/serve/saturation_ab.sh $O/$name LLAMA2_FUSE_ROPE "1" > $O/$name.txt 2>&1; echo "$name rc=$? $(grep -E 'tok/s' $O/$name.txt | head -1) [$((SECONDS-t1)) s] $((SECONDS-t0)) s" >> $O/env.txt; cat $O/$name/*.steps.md >> $O/env.txt; rm -f $O/$name/*.steps; pack; }
sat sat13b_fp8_mb512 SYNTHETIC=13b MAX_BATCH=512 SERVE_ARGS="--kv-cache-dtype fp8 --weight-dtype fp8"
sat sat13b_fp8_mb1024 SYNTHETIC=13b MAX_BATCH=1024 SERVE_ARGS="--kv-cache-dtype fp8 --weight-dtype fp8"
sat sat7b_fp8kv_mb512 MAX_BATCH=512 SERVE_ARGS="--kv-cache-dtype fp8"
sat sat7b_fp8kv_mb1024 MAX_BATCH=1024 SERVE_ARGS="--kv-cache-dtype fp8"
sat sat7b_fp16_mb512 MAX_BATCH=512
date -u >> $O/env.txt; pack; cat $O/env.txt
