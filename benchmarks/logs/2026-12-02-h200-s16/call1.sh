# Session 16, call 1 (tree s16-combined = main cb64dc6 + s16-fp8-bf16-sums + s16-int8-dequant-ahead):
# whole GPU suite (first run of 62cb4e6's automatic warp decode kernel, the fp8 bf16 sums and the
# dequant-ahead stream); 7B fp16 batches 16-128; fp8 sums bf16 (default build) vs fp32
# (-DLLAMA2_FP8_SUMS_FP32=1 build) alternating; int8 LLAMA2_DEQUANT_AHEAD 1 vs 0 alternating and the
# greedy-identity check; 13B fp8 saturation per sums build; 7B int8 saturation ahead 1 vs 0.
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
# The fp32-sums build runs on the CPUs while the GPU suite runs.
( cmake -S . -B build-gpu-fp32 -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA2_WERROR=ON \
  -DCMAKE_CUDA_FLAGS=-DLLAMA2_FP8_SUMS_FP32=1 -DCMAKE_CXX_FLAGS=-DLLAMA2_FP8_SUMS_FP32=1 > $O/build_fp32.log 2>&1 &&
  nice ninja -C build-gpu-fp32 llama2 llama2_bench_e2e 2>&1 | grep -vE "^\[[0-9]+/[0-9]+\] " >> $O/build_fp32.log; echo "fp32 build rc=${PIPESTATUS[0]}" >> $O/build_fp32.log ) &
bpid=$!
timeout 240 build-gpu/tests/llama2_gpu_tests --force-colors=0 > $O/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' $O/gpu_tests.log | tr '\n' ' ') $((SECONDS-t0)) s" >> $O/env.txt
grep -B2 -A12 "ERROR\|FAILED" $O/gpu_tests.log | head -60 >> $O/env.txt; pack
wait $bpid; echo "$(tail -1 $O/build_fp32.log) $((SECONDS-t0)) s" >> $O/env.txt
mpi() { timeout ${TL:-120} mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "$@"; }
e2e() { local name=$1 b=$2 envs=$3; shift 3; local t1=$SECONDS; mpi -np 1 $envs $b/llama2_bench_e2e --synthetic 7b --prompt-len 128 --decode-steps 64 --repeats 3 "$@" > $O/$name.log 2>&1; echo "$name: rc=$? $(grep -E 'batch +[0-9]+:|prefill' $O/$name.log | sed 's/ median of 3//' | tr '\n' ' ') [$((SECONDS-t1)) s] $((SECONDS-t0)) s" >> $O/env.txt; }
e2e fp16_bs build-gpu "" --batches 16,32,64,128 --prefill-lens 2048
for r in 1 2; do
  e2e fp8_bf16sums_$r build-gpu "" --weight-dtype fp8 --batches 64 --prefill-lens 512,2048
  e2e fp8_fp32sums_$r build-gpu-fp32 "" --weight-dtype fp8 --batches 64 --prefill-lens 512,2048
  e2e int8_ahead1_$r build-gpu "-x LLAMA2_DEQUANT_AHEAD=1" --weight-dtype int8 --batches 64,128,256 --prefill-lens 512,2048
  e2e int8_ahead0_$r build-gpu "-x LLAMA2_DEQUANT_AHEAD=0" --weight-dtype int8 --batches 64,128,256 --prefill-lens 512,2048
  pack
done
prompt=$(printf 'the quick brown fox jumps over the lazy dog %.0s' $(seq 12))
for a in 1 0; do
  mpi -np 1 -x LLAMA2_DEQUANT_AHEAD=$a build-gpu/llama2 generate --model tests/models/small-d128-f16 \
    --backend cuda --weight-dtype int8 --prompt "$prompt" --max-new-tokens 32 --temperature 0 --json > $O/generate_$a.json 2> $O/generate_$a.err
  echo "generate ahead=$a rc=$?" >> $O/env.txt
done
python3 - $O/generate_1.json $O/generate_0.json >> $O/env.txt 2>&1 <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
same = a["token_ids"] == b["token_ids"] and a["text"] == b["text"]
print(f"generate: {len(a['prompt_token_ids'])}-token prompt, greedy ids " + ("identical" if same else f"DIFFER: {a['token_ids']} vs {b['token_ids']}"))
PY
pack
sat() { local name=$1 var=$2 vals=$3; shift 3; local t1=$SECONDS; env SKIP_BUILD=1 "$@" timeout 200 bash benchmarks/serve/saturation_ab.sh $O/$name $var "$vals" > $O/$name.txt 2>&1; echo "$name rc=$? $(grep -E 'tok/s' $O/$name.txt | tr '\n' ' ') [$((SECONDS-t1)) s] $((SECONDS-t0)) s" >> $O/env.txt; cat $O/$name/*.steps.md >> $O/env.txt; rm -f $O/$name/*.steps; pack; }
sat sat13b_bf16sums LLAMA2_FUSE_ROPE 1 SYNTHETIC=13b SERVE_ARGS="--kv-cache-dtype fp8 --weight-dtype fp8"
sat sat13b_fp32sums LLAMA2_FUSE_ROPE 1 BUILD_DIR=build-gpu-fp32 SYNTHETIC=13b SERVE_ARGS="--kv-cache-dtype fp8 --weight-dtype fp8"
sat sat7b_int8 LLAMA2_DEQUANT_AHEAD "1 0" SERVE_ARGS="--weight-dtype int8"
date -u >> $O/env.txt; pack; cat $O/env.txt
