# Session 14, call 4 (final): the scales of o/down in the residual add; full GPU suite, A/B, fp16 regression, 13B fp8 saturation, wquant.
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
e2e() { local name=$1 envs=$2; shift 2; local t1=$SECONDS; mpi -np 1 $envs build-gpu/llama2_bench_e2e --synthetic 7b --prompt-len 128 --decode-steps 64 --repeats 3 "$@" > $O/$name.log 2>&1; echo "$name: rc=$? $(grep -E 'batch +[0-9]+:|prefill' $O/$name.log | sed 's/ median of 3//' | tr '\n' ' ') [$((SECONDS-t1)) s] $((SECONDS-t0)) s" >> $O/env.txt; }
for r in 1 2; do
e2e fp8_b64_fuse1_$r "" --weight-dtype fp8 --batches 64 --prefill-lens 2048
e2e fp8_b64_fuse0_$r "-x LLAMA2_FP8_FUSE=0" --weight-dtype fp8 --batches 64 --prefill-lens 2048
done
pack
e2e fp8_bs_fuse1 "" --weight-dtype fp8 --batches 1,16,32,128 --prefill-lens 512
e2e fp8_b64_fp8kv "" --weight-dtype fp8 --kv-cache-dtype fp8 --batches 64 --prefill-lens ""
e2e fp16_b1_64 "" --batches 1,64 --prefill-lens 2048
pack
mpi -np 1 -x LLAMA2_OP_PROFILE=1 build-gpu/llama2_bench_e2e --synthetic 7b --weight-dtype fp8 --batches 64 --prompt-len 128 --decode-steps 3 --warmup 1 --repeats 1 --prefill-lens "" > $O/prof.log 2>&1
grep op-profile $O/prof.log | tail -2 > $O/prof_fp8_b64.txt; rm -f $O/prof.log
echo "prof $(tail -1 $O/prof_fp8_b64.txt) $((SECONDS-t0)) s" >> $O/env.txt; pack
SKIP_BUILD=1 SYNTHETIC=13b SERVE_ARGS="--kv-cache-dtype fp8 --weight-dtype fp8" timeout 150 bash benchmarks/serve/saturation_ab.sh $O/sat13b LLAMA2_FP8_FUSE "1" > $O/sat13b.txt 2>&1
echo "sat13b fp8 w + fp8 kv rc=$? $(grep -iE 'tok/s' $O/sat13b.txt | head -2 | tr '\n' ' ') $((SECONDS-t0)) s" >> $O/env.txt; rm -f $O/sat13b/*.steps; pack
CHECKS=wquant NPS=1 SKIP_BUILD=1 timeout 280 bash tests/reference/gpu_check.sh $O/wquant > $O/wquant.log 2>&1
echo "wquant rc=$? $((SECONDS-t0)) s" >> $O/env.txt; grep -E "^(RESULT|NOISE|STEP)" $O/wquant/summary.txt >> $O/env.txt; rm -rf $O/wquant/fixtures* $O/wquant/logs
date -u >> $O/env.txt; pack; cat $O/env.txt
