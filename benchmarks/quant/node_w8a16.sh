#!/usr/bin/env bash
# The W8A16 GEMM (kernels/gemm_w8a16.cu) on a GPU node: its kernel tests, its kernel benchmark
# against cuBLAS fp16 and the dequantize + cuBLAS path, and llama2_bench_e2e on synthetic 7B
# shapes (batch 1 and 64 with 128-token prompts, a 2048-token prefill) for fp16 weights, int8
# weights (the default path: dequantize + cuBLAS above the GEMV), and int8 with the W8A16 GEMM up
# to 256 rows (LLAMA2_W8A16_ROWS=256); then fp8 weights at batch 64,
# cuBLASLt FP8 against the W8A16 GEMM on e4m3 weights (LLAMA2_W8A16_FP8=1). One log per step in
# OUT_DIR, summary.txt with one line each. About 3-4 minutes after the build.
#
#   bash benchmarks/quant/node_w8a16.sh OUT_DIR [PARTS]
#   PARTS (default "tests bench e2e"): tests, bench, e2e, and wquant (tests/reference/gpu_check.sh
#   CHECKS=wquant NPS=1: CUDA against HF with the same quantization; not in the default set)
# Environment: SKIP_BUILD=1, REPEATS=3.
set -uo pipefail
OUT=${1:?usage: node_w8a16.sh OUT_DIR [PARTS]}
PARTS=${2:-"tests bench e2e"}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
REPEATS=${REPEATS:-3}
has() { [[ " $PARTS " == *" $1 "* ]]; }
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
{ date -u; nvidia-smi -L; git rev-parse HEAD 2>/dev/null; git status --short 2>/dev/null; } \
  > "$OUT/env.txt" 2>&1

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  t0=$SECONDS
  targets=(llama2 llama2_gpu_tests llama2_bench_kernels llama2_bench_e2e)
  has wquant && targets+=(llama2_reference_test)
  timeout 1200 bash benchmarks/gpu/build.sh "${targets[@]}" > "$OUT/build.log" 2>&1
  rc=$?
  note "build rc=$rc seconds=$((SECONDS - t0))"
  [[ $rc -eq 0 ]] || exit 1
fi

if has tests; then
  timeout 120 build-gpu/tests/llama2_gpu_tests --force-colors=0 \
    -tc="gemm_w8a16*,CudaLinear int8*,dequantize_rows*,launch errors*,quantize_rows*,gemv_q*" \
    > "$OUT/tests.log" 2>&1
  note "tests rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/tests.log" | tr '\n' ' ')"
fi

if has bench; then
  timeout 240 build-gpu/llama2_bench_kernels w8a16 > "$OUT/bench.log" 2>&1
  note "bench rc=$? (bench.log)"
fi

# e2e NAME [ENV=VALUE ...] -- ARGS...: one llama2_bench_e2e run, its JSON in OUT/NAME.json.
e2e() {
  local name=$1
  shift
  local envs=()
  while [[ $1 != -- ]]; do envs+=(-x "$1"); shift; done
  shift
  local t0=$SECONDS
  timeout 300 mpirun -np 1 --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST \
    -x NVSHMEM_DISABLE_NVLS "${envs[@]}" build-gpu/llama2_bench_e2e --repeats "$REPEATS" \
    --json "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  note "$name rc=$rc seconds=$((SECONDS - t0)) $(python3 - "$OUT/$name.json" <<'PY' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))
d = " ".join(f"b{x['batch']}={x['tok_s']:.0f}tok/s" for x in r.get("decode", []))
p = " ".join(f"prefill{x['prompt_len']}={x['ttft_ms']:.1f}ms/{x.get('model_tflops', 0):.0f}TFLOP/s" for x in r.get("prefill", []))
print(r.get("weight_dtype"), d, p)
PY
)"
}
if has e2e; then
  args=(--synthetic 7b --batches 1,64 --prompt-len 128 --prefill-lens 2048)
  e2e e2e-7b-auto -- "${args[@]}" --weight-dtype auto
  e2e e2e-7b-int8 -- "${args[@]}" --weight-dtype int8  # the default: dequantize + cuBLAS
  e2e e2e-7b-int8-w8a16 LLAMA2_W8A16_ROWS=256 -- "${args[@]}" --weight-dtype int8
  # fp8 weights at batch 64: cuBLASLt FP8 (W8A8) against the W8A16 GEMM with e4m3 weights.
  e2e e2e-7b-fp8-b64 -- --synthetic 7b --batches 64 --prompt-len 128 --prefill-lens "" \
    --weight-dtype fp8
  e2e e2e-7b-fp8-b64-w8a16 LLAMA2_W8A16_FP8=1 -- --synthetic 7b --batches 64 --prompt-len 128 \
    --prefill-lens "" --weight-dtype fp8
fi

if has wquant; then
  timeout 600 env CHECKS=wquant NPS=1 SKIP_BUILD=1 bash tests/reference/gpu_check.sh \
    "$OUT/wquant" > "$OUT/wquant.log" 2>&1
  note "wquant rc=$?"
  grep -E '^(RESULT|STEP)' "$OUT/wquant/summary.txt" >> "$OUT/summary.txt" 2>/dev/null
fi
note "done"
