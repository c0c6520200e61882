# Final device call on main aa599e2: wquant reference check, int8 b64 routing A/B, 13B fp8 saturation, 70B fp8 b1.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/all.tgz.tmp -C $O . 2>/dev/null && mv $OUT/all.tgz.tmp $OUT/all.tgz; }
{ date -u; echo "tree: main aa599e2"; nvidia-smi -L; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 200 bash tests/gpu/node_build.sh llama2 llama2_gpu_tests llama2_bench_e2e llama2_reference_test > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
CHECKS=wquant NPS=1 SKIP_BUILD=1 timeout 150 bash tests/reference/gpu_check.sh $O/wquant > $O/wquant.log 2>&1
echo "wquant rc=$? $((SECONDS-t0)) s" >> $O/env.txt; grep -E "^(RESULT|NOISE)" $O/wquant/summary.txt >> $O/env.txt; rm -rf $O/wquant/fixtures; pack
mpi() { timeout 60 mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "$@"; }
for rows in 0 256; do
  mpi -x LLAMA2_W8A16_ROWS=$rows -np 1 build-gpu/llama2_bench_e2e --synthetic 7b --weight-dtype int8 --batches 64 --prompt-len 128 --prefill-lens "" --repeats 2 > $O/int8-b64-rows$rows.log 2>&1
  echo "int8 b64 LLAMA2_W8A16_ROWS=$rows: $(grep -m1 'batch   64' $O/int8-b64-rows$rows.log) $((SECONDS-t0)) s" >> $O/env.txt
done; pack
SKIP_BUILD=1 SYNTHETIC=13b SERVE_ARGS="--kv-cache-dtype fp8 --weight-dtype fp8" timeout 120 bash benchmarks/serve/saturation_ab.sh $O/sat13b LLAMA2_MIXED_DECODE 1 > $O/sat13b.txt 2>&1
echo "sat13b fp8 w + fp8 kv rc=$? $(grep -m1 -iE 'tok/s' $O/sat13b.txt) $((SECONDS-t0)) s" >> $O/env.txt; rm -f $O/sat13b/*.steps; pack
timeout 40 bash -c 'while pgrep -f "[b]uild-gpu/llama2 serve" >/dev/null; do sleep 0.5; done'
mpi -np 1 build-gpu/llama2_bench_e2e --synthetic 70b --weight-dtype fp8 --batches 1 --prefill-lens "" --decode-steps 64 --repeats 2 > $O/e2e70b-fp8.log 2>&1
echo "70b fp8 b1: $(grep -m1 'batch    1' $O/e2e70b-fp8.log) $((SECONDS-t0)) s" >> $O/env.txt; date -u >> $O/env.txt; pack
cat $O/env.txt
