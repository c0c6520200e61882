#!/usr/bin/env bash
# One GPU-node run after a restructuring that CI cannot check on a GPU (the architecture issue: the
# typed EngineConfig reaching the CUDA runner, the one Comm interface, the request owner / batch
# scheduler split), plus the prefill kernel's end-to-end effect. Each step's log in OUTDIR:
#   1. build-gpu/ (llama2, the reference test, the kernel tests, the e2e bench); BASELINE's llama2;
#   2. the kernel tests (tests/gpu/);
#   3. 7B synthetic prefill of 2048 tokens and batch-1 decode, LLAMA2_PREFILL_KERNEL=wmma vs mma;
#   4. 7B serve saturation, BASELINE vs this tree (benchmarks/serve/before_after.sh, ROUNDS rounds);
#   5. tests/reference/gpu_check.sh at np 1 (CUDA vs the CPU and HF fixtures), last: the longest.
#   bash benchmarks/gpu/restructure_check.sh BASELINE_DIR OUTDIR [ROUNDS]
# (Before: tests/gpu/node_restructure_check.sh, run once for issue 15 on 2026-12-01. The baseline is
# a copy of an older tree, e.g. `git archive BASE | tar -x -C bench-baseline`; one older than the
# move builds with its tests/gpu/node_build.sh.)
set -uo pipefail
BASE=${1:?usage: restructure_check.sh BASELINE_DIR OUTDIR [ROUNDS]}
OUT=${2:?usage: restructure_check.sh BASELINE_DIR OUTDIR [ROUNDS]}
ROUNDS=${3:-1}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
BASE=$(cd "$BASE" && pwd)
cd "$(dirname "$0")/../.." || exit 1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
step() {  # NAME COMMAND...
  local name=$1 t0=$SECONDS
  shift
  "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "STEP $name rc=$rc seconds=$((SECONDS - t0))" | tee -a "$OUT/summary.txt"
}
step build bash benchmarks/gpu/build.sh llama2 llama2_reference_test llama2_gpu_tests llama2_bench_e2e
base_build=benchmarks/gpu/build.sh
[[ -f $BASE/$base_build ]] || base_build=tests/gpu/node_build.sh
step build_baseline bash -c "cd '$BASE' && bash $base_build llama2"
step gpu_tests build-gpu/tests/llama2_gpu_tests
for k in wmma mma; do
  step "e2e_prefill_$k" env LLAMA2_PREFILL_KERNEL=$k build-gpu/llama2_bench_e2e --synthetic 7b \
    --dtype fp16 --batches 1 --prompt-len 128 --decode-steps 32 --prefill-lens 2048 \
    --warmup 1 --repeats 3
done
step saturation bash benchmarks/serve/before_after.sh "$BASE" "$OUT/saturation" "$ROUNDS"
step gpu_check env NPS=1 SKIP_BUILD=1 bash tests/reference/gpu_check.sh "$OUT/gpu_check"
