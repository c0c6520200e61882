#!/usr/bin/env bash
# Batch-1 decode with 1-byte weights (issue 20) on one H200: the quantized GEMV's kernel tests, the
# streaming GEMV benchmark (old and new arithmetic side by side) and 7B batch-1 decode per weight
# dtype, with the old path (LLAMA2_QGEMV=old) and the f16x2 variant (LLAMA2_QGEMV=half2) for A/B.
#
#   bash benchmarks/quant/node_qgemv.sh OUT_DIR [PARTS]   (from the repository root)
#   PARTS (default "kernels bench e2e7b", ~3-4 minutes): any of
#     kernels  llama2_gpu_tests -tc="*quant*,gemv*"
#     bench    llama2_bench_kernels qgemv (streaming GEMV, fp16 / fp8 / int8, old and new side by side)
#     e2e7b    7B batch 1 per weight dtype: auto, fp8, int8; fp8 and int8 with LLAMA2_QGEMV=old
#              and =half2
#     e2e70b   70B batch 1 on ONE H200 with fp8 weights (default and LLAMA2_QGEMV=old)
#     wquant   CHECKS=wquant NPS=1 tests/reference/gpu_check.sh (HF with the same quantization)
#
# Environment: SKIP_BUILD=1 (build-gpu/ is current), REPEATS=3, BUDGET_S=220 (e2e runs that would
# start after this many seconds are skipped and say so). Outputs in OUT_DIR: build.log,
# kernels.log, qgemv.log, e2e-*.{log,json}, summary.txt (one line per step).
set -uo pipefail
OUT=${1:?usage: node_qgemv.sh OUT_DIR [PARTS]}
PARTS=${2:-"kernels bench e2e7b"}
has() { [[ " $PARTS " == *" $1 "* ]]; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
REPEATS=${REPEATS:-3}
BUDGET_S=${BUDGET_S:-220}
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
{ date -u; nvidia-smi -L; git rev-parse HEAD 2>/dev/null; git status --short 2>/dev/null | head -20; } \
  > "$OUT/env.txt" 2>&1

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  targets="llama2 llama2_gpu_tests llama2_bench_kernels llama2_bench_e2e"
  has wquant && targets+=" llama2_reference_test"
  # shellcheck disable=SC2086
  timeout 900 bash benchmarks/gpu/build.sh $targets > "$OUT/build.log" 2>&1 ||
    { note "build FAILED (build.log)"; exit 1; }
  note "build ok ($SECONDS s)"
fi
START=$SECONDS

if has kernels; then
  timeout 180 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc="*quant*,gemv*" \
    > "$OUT/kernels.log" 2>&1
  note "kernels rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/kernels.log" | tr '\n' ' ')"
fi

if has bench; then
  timeout 180 build-gpu/llama2_bench_kernels qgemv > "$OUT/qgemv.log" 2>&1
  note "qgemv bench rc=$? ($((SECONDS - START)) s so far)"
  grep -E '^  (qkv|o_proj|gate|down)' "$OUT/qgemv.log" >> "$OUT/summary.txt"
fi

if has wquant; then
  CHECKS=wquant NPS=1 SKIP_BUILD=1 timeout 900 bash tests/reference/gpu_check.sh "$OUT/wquant" \
    > "$OUT/wquant.log" 2>&1
  note "wquant rc=$?"
  grep -E '^(RESULT|NOISE|STEP)' "$OUT/wquant/summary.txt" >> "$OUT/summary.txt"
fi

# e2e NAME [ENV=VALUE...] -- ARGS...: one batch-1 llama2_bench_e2e run (7B unless ARGS say).
e2e() {
  local name=$1 envs=()
  shift
  while [[ $# -gt 0 && $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  if (( SECONDS - START > BUDGET_S )); then note "$name skipped (over the ${BUDGET_S} s budget)"; return; fi
  local xs=()
  for e in "${envs[@]}"; do xs+=(-x "$e"); done
  env "${envs[@]}" timeout 150 mpirun --bind-to none -x NCCL_NVLS_ENABLE \
    -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "${xs[@]}" -np 1 \
    build-gpu/llama2_bench_e2e --batches 1 --prompt-len 128 --decode-steps 64 \
    --prefill-lens "" --repeats "$REPEATS" --json "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  note "$name rc=$rc $(grep -m1 -E '^decode +batch +1:' "$OUT/$name.log" | sed 's/  */ /g') ($((SECONDS - START)) s)"
}
if has e2e7b; then
  e2e e2e-auto -- --synthetic 7b --weight-dtype auto
  e2e e2e-fp8 -- --synthetic 7b --weight-dtype fp8
  e2e e2e-int8 -- --synthetic 7b --weight-dtype int8
  e2e e2e-fp8-old LLAMA2_QGEMV=old -- --synthetic 7b --weight-dtype fp8
  e2e e2e-int8-old LLAMA2_QGEMV=old -- --synthetic 7b --weight-dtype int8
  e2e e2e-fp8-half2 LLAMA2_QGEMV=half2 -- --synthetic 7b --weight-dtype fp8
  e2e e2e-int8-half2 LLAMA2_QGEMV=half2 -- --synthetic 7b --weight-dtype int8
fi
if has e2e70b; then
  e2e e2e-70b-fp8 -- --synthetic 70b --weight-dtype fp8
  e2e e2e-70b-fp8-old LLAMA2_QGEMV=old -- --synthetic 70b --weight-dtype fp8
fi
note "done ($((SECONDS - START)) s after the build)"
