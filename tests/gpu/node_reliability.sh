#!/usr/bin/env bash
# The reliability checks of issue 14 that need a GPU, in one run on a one-GPU node (TP 1):
#   a. build-gpu/ (Release, sm_90) and the kernel tests (tests/gpu/);
#   b. the step watchdog on the CUDA backend: rank 0's step 3 never ends (LLAMA2_TEST_STALL hook);
#      every client answered, health "stalled", the job gone, socket removed, times printed;
#   c. the serve soak on the CUDA backend: 10,000 requests, each rank's RSS, descriptors and device
#      memory at 1,000 and at the end (no growth);
#   d. 7B synthetic saturation through `serve` (benchmarks/serve/saturation_ab.sh, one value), to
#      compare with the RESULTS.md row measured before the serve-path changes.
#
#   bash tests/gpu/node_reliability.sh OUTDIR        (each step's log in OUTDIR; exit 1 if any failed)
#   SKIP_SATURATION=1 leaves out d.
set -uo pipefail  # no -e: every step runs and reports
OUT=${1:?usage: node_reliability.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.." || exit 1
source launch/env.sh
status=0
step() {  # step NAME COMMAND...: runs it, tees its output to OUTDIR/NAME.log, records the result
  local name=$1
  shift
  local t0=$SECONDS
  "$@" 2>&1 | tee "$OUT/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "STEP $name rc=$rc seconds=$((SECONDS - t0))" | tee -a "$OUT/summary.txt"
  [[ $rc -eq 0 ]] || status=1
}

step build bash tests/gpu/node_build.sh
step gpu_tests build-gpu/tests/llama2_gpu_tests --force-colors=0
step watchdog_cuda build-gpu/tests/llama2_watchdog_test build-gpu/llama2 \
  tests/models/small-d128-f16 tests/integration/mpirun.sh hook cuda
LLAMA2_TEST_TIMEOUT=400 step soak_cuda build-gpu/tests/llama2_serve_soak build-gpu/llama2 \
  models/docs-8m tests/integration/mpirun.sh --np 1 --backend cuda --record "$OUT/soak_cuda.txt"
[[ ${SKIP_SATURATION:-0} == 1 ]] || SKIP_BUILD=1 step saturation bash benchmarks/serve/saturation_ab.sh "$OUT/saturation" \
  LLAMA2_WARMUP 1
exit $status
