#!/usr/bin/env bash
# The fp8 products' unscaled sums in bf16 (kernels::Fp8Sum, the default) vs fp32 (a second build
# with -DLLAMA2_FP8_SUMS_FP32=1), on one GPU node, in one call:
#   1. both builds (build-gpu: bf16 sums; build-gpu-fp32: fp32 sums);
#   2. the fp8 kernel tests on the bf16 build (`fp8 fused*`, `*quant*`);
#   3. 7B fp8: 2048-token prefill and batch 64, alternating bf16 / fp32, REPEATS rounds;
#   4. 13B fp8 weights + fp8 KV `serve` saturation (benchmarks/serve/saturation_ab.sh), each build;
#   5. CHECKS=wquant NPS=1 tests/reference/gpu_check.sh on the bf16 build.
#
#   bash benchmarks/quant/node_fp8_sums.sh OUT_DIR
#
# Environment (optional): REPEATS=2, SKIP_SAT=1 and SKIP_WQUANT=1 to leave steps 4 / 5 out.
# Writes OUT_DIR/env.txt (one line per step) and a log per step. About 6-8 minutes.
set -uo pipefail
OUT=${1:?usage: node_fp8_sums.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.."
source launch/env.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
t0=$SECONDS
log() { echo "$* [$((SECONDS - t0)) s]" | tee -a "$OUT/env.txt"; }
{ date -u; git log --oneline -1; nvidia-smi -L; } >"$OUT/env.txt" 2>&1

bash benchmarks/gpu/build.sh llama2 llama2_gpu_tests llama2_bench_e2e llama2_reference_test \
  >"$OUT/build.log" 2>&1
log "build (bf16 sums) rc=$?"
cmake -S . -B build-gpu-fp32 -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA2_WERROR=ON \
  -DCMAKE_CUDA_FLAGS=-DLLAMA2_FP8_SUMS_FP32=1 -DCMAKE_CXX_FLAGS=-DLLAMA2_FP8_SUMS_FP32=1 \
  >"$OUT/build_fp32.log" 2>&1 &&
  ninja -C build-gpu-fp32 llama2 llama2_bench_e2e >>"$OUT/build_fp32.log" 2>&1
log "build (fp32 sums) rc=$?"

timeout 200 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc='fp8 fused*,*quant*,gemv*' \
  >"$OUT/gpu_tests.log" 2>&1
log "gpu tests rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/gpu_tests.log" | tr '\n' ' ')"

e2e() {  # name build
  timeout 120 mpirun --allow-run-as-root --bind-to none -np 1 -x NCCL_NVLS_ENABLE \
    -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "$2/llama2_bench_e2e" \
    --synthetic 7b --weight-dtype fp8 --batches 64 --prompt-len 128 --decode-steps 64 \
    --repeats 3 --prefill-lens 2048 >"$OUT/$1.log" 2>&1
  log "$1 rc=$? $(grep -E 'batch +64:|P +2048' "$OUT/$1.log" | sed 's/ median of 3//' | tr '\n' ' ')"
}
for r in $(seq "${REPEATS:-2}"); do
  e2e "e2e_bf16_$r" build-gpu
  e2e "e2e_fp32_$r" build-gpu-fp32
done

if [[ "${SKIP_SAT:-0}" != 1 ]]; then
  for b in build-gpu build-gpu-fp32; do
    SKIP_BUILD=1 BUILD_DIR=$b SYNTHETIC=13b SERVE_ARGS="--kv-cache-dtype fp8 --weight-dtype fp8" \
      timeout 200 bash benchmarks/serve/saturation_ab.sh "$OUT/sat13b-$b" LLAMA2_FP8_FUSE 1 \
      >"$OUT/sat13b-$b.txt" 2>&1
    log "13B saturation $b rc=$? $(grep -E 'tok/s' "$OUT/sat13b-$b.txt" | head -1)"
    rm -f "$OUT/sat13b-$b"/*.steps
  done
fi
if [[ "${SKIP_WQUANT:-0}" != 1 ]]; then
  CHECKS=wquant NPS=1 SKIP_BUILD=1 timeout 300 bash tests/reference/gpu_check.sh "$OUT/wquant" \
    >"$OUT/wquant.log" 2>&1
  log "wquant rc=$?"
  grep -E "^(RESULT|STEP)" "$OUT/wquant/summary.txt" >>"$OUT/env.txt"
  rm -rf "$OUT/wquant"/fixtures* "$OUT/wquant/logs"
fi
log "done"
