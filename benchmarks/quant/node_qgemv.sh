#!/usr/bin/env bash
# Batch-1 decode with 1-byte weights (issue 20) on one H200: the quantized GEMV's kernel tests, the
# streaming GEMV benchmark (old and new arithmetic side by side) and 7B batch-1 decode per weight
# dtype, with the old path (LLAMA2_QGEMV=old) and the f16x2 variant (LLAMA2_QGEMV=half2) for A/B.
#
#   bash benchmarks/quant/node_qgemv.sh OUT_DIR        (from the repository root; ~3-4 minutes)
#
# Environment: SKIP_BUILD=1 (build-gpu/ is current), REPEATS=3, BUDGET_S=220 (e2e runs that would
# start after this many seconds are skipped and say so). Outputs in OUT_DIR: build.log,
# kernels.log, qgemv.log, e2e-*.{log,json}, summary.txt (one line per step).
set -uo pipefail
OUT=${1:?usage: node_qgemv.sh OUT_DIR}
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
  timeout 900 bash tests/gpu/node_build.sh llama2 llama2_gpu_tests llama2_bench_kernels \
    llama2_bench_e2e > "$OUT/build.log" 2>&1 || { note "build FAILED (build.log)"; exit 1; }
  note "build ok ($SECONDS s)"
fi
START=$SECONDS

timeout 180 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc="*quant*,gemv*" \
  > "$OUT/kernels.log" 2>&1
note "kernels rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/kernels.log" | tr '\n' ' ')"

timeout 180 build-gpu/llama2_bench_kernels qgemv 2>&1 | tee "$OUT/qgemv.log" > /dev/null
note "qgemv bench rc=${PIPESTATUS[0]} ($((SECONDS - START)) s so far)"
grep -E '^  (qkv|o_proj|gate|down)' "$OUT/qgemv.log" | sed 's/^ */  /' >> "$OUT/summary.txt"

# e2e NAME [ENV=VALUE...] -- ARGS...: one 7B batch-1 llama2_bench_e2e run.
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
    build-gpu/llama2_bench_e2e --synthetic 7b --batches 1 --prompt-len 128 --decode-steps 64 \
    --prefill-lens "" --repeats "$REPEATS" --json "$OUT/$name.json" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  note "$name rc=$rc $(grep -m1 -E '^decode +batch +1:' "$OUT/$name.log" | sed 's/  */ /g') ($((SECONDS - START)) s)"
}
e2e e2e-auto -- --weight-dtype auto
e2e e2e-fp8 -- --weight-dtype fp8
e2e e2e-int8 -- --weight-dtype int8
e2e e2e-fp8-old LLAMA2_QGEMV=old -- --weight-dtype fp8
e2e e2e-int8-old LLAMA2_QGEMV=old -- --weight-dtype int8
e2e e2e-fp8-half2 LLAMA2_QGEMV=half2 -- --weight-dtype fp8
e2e e2e-int8-half2 LLAMA2_QGEMV=half2 -- --weight-dtype int8
note "done ($((SECONDS - START)) s after the build)"
