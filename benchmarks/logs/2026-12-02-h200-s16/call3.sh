# Session 16, call 3 (main with the bf16 sums merged, 61225ff): whole GPU suite; held-out perplexity
# of models/docs-8m with fp16 / fp8 / int8 weights (the README's quantization table); 7B fp8 final
# figures (batch 1, 16-128, 64 with fp8 KV, prefill 512 / 2048; LLAMA2_FP8_TUNE=1 at batch 64 / prefill
# 2048; two runs); 13B fp8 saturation and 7B fp8 KV saturation again.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source launch/env.sh >/dev/null 2>&1
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/all.tgz.tmp -C $O . 2>/dev/null && mv $OUT/all.tgz.tmp $OUT/all.tgz; }
{ date -u; git log --oneline -1; git status --short | head; nvidia-smi -L; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 240 bash tests/gpu/node_build.sh llama2 llama2_gpu_tests llama2_bench_e2e > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
timeout 240 build-gpu/tests/llama2_gpu_tests --force-colors=0 > $O/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' $O/gpu_tests.log | tr '\n' ' ') $((SECONDS-t0)) s" >> $O/env.txt
grep -B2 -A12 "ERROR\|FAILED" $O/gpu_tests.log | head -40 >> $O/env.txt; pack
timeout 200 bash benchmarks/accuracy/perplexity_matrix.sh build-gpu/llama2 models/docs-8m \
  tests/reference/perplexity/heldout-excerpt.txt $O/ppl \
  cuda:fp16:auto:1 cuda:fp16:auto:1:fp8 cuda:fp16:auto:1:int8 cuda:bf16:auto:1 \
  cuda:bf16:auto:1:fp8 cuda:bf16:auto:1:int8 > $O/ppl.log 2>&1
echo "ppl rc=$? $((SECONDS-t0)) s" >> $O/env.txt; cat $O/ppl/table.md >> $O/env.txt; pack
mpi() { timeout ${TL:-120} mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "$@"; }
e2e() { local name=$1; shift; local t1=$SECONDS; mpi -np 1 ${ENVS:-} build-gpu/llama2_bench_e2e --synthetic 7b --prompt-len 128 --decode-steps 64 --repeats 3 "$@" > $O/$name.log 2>&1; echo "$name: rc=$? $(grep -E 'batch +[0-9]+:|prefill' $O/$name.log | sed 's/ median of 3//' | tr '\n' ' ') [$((SECONDS-t1)) s] $((SECONDS-t0)) s" >> $O/env.txt; }
for r in 1 2; do
  e2e fp8_$r --weight-dtype fp8 --batches 1,16,32,64,128 --prefill-lens 512,2048
  e2e fp8_fp8kv_$r --weight-dtype fp8 --kv-cache-dtype fp8 --batches 64 --prefill-lens ""
  ENVS="-x LLAMA2_FP8_TUNE=1" e2e fp8_tune_$r --weight-dtype fp8 --batches 64 --prefill-lens 2048
  pack
done
sat() { local name=$1; shift; local t1=$SECONDS; env SKIP_BUILD=1 "$@" timeout 200 bash benchmarks/serve/saturation_ab.sh $O/$name LLAMA2_FUSE_ROPE 1 > $O/$name.txt 2>&1; echo "$name rc=$? $(grep -E 'tok/s' $O/$name.txt | tr '\n' ' ') [$((SECONDS-t1)) s] $((SECONDS-t0)) s" >> $O/env.txt; cat $O/$name/*.steps.md >> $O/env.txt; rm -f $O/$name/*.steps; pack; }
sat sat13b_fp8 SYNTHETIC=13b SERVE_ARGS="--kv-cache-dtype fp8 --weight-dtype fp8"
sat sat7b_fp8kv SERVE_ARGS="--kv-cache-dtype fp8"
date -u >> $O/env.txt; pack; cat $O/env.txt
