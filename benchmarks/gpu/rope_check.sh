#!/usr/bin/env bash
# rope_scaling on CUDA (issue 37): the committed transformers fixtures use tiny models whose head
# size the CUDA kernels do not take, so CUDA is checked against the CPU backend, which those
# fixtures check against transformers (reference.tiny-*.rope-*). tests/models/small-d64 (head size
# 64) with config.json's rope_scaling set, fp32, 19 tokens run token by token, as one prefill and
# in chunks of 5 (llama2_logits_diff --backend cuda --against-backend cpu):
#   linear x4 (max_position_embeddings 64) and dynamic x4 over an original 8 positions, so that
#   every run past position 8 rescales; none (the control).
# Must FAIL: CUDA with linear x4 against the CPU with dynamic x4 (the comparison sees scaling).
#   usage: benchmarks/gpu/rope_check.sh [BUILD_DIR]     (default build-gpu; prints RESULT lines)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUILD=${1:-build-gpu}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
variant() {  # variant NAME JSON_OF_rope_scaling MAX_POSITIONS
  cp -r tests/models/small-d64 "$TMP/$1"
  python3 - "$TMP/$1/config.json" "$2" "$3" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_scaling"] = json.loads(sys.argv[2])
c["max_position_embeddings"] = int(sys.argv[3])
json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
}
variant linear4 '{"type": "linear", "factor": 4.0}' 64
variant dynamic4 '{"type": "dynamic", "factor": 4.0}' 8
variant none null 64
diff_run() {  # diff_run NAME MODEL AGAINST
  timeout 120 mpirun --allow-run-as-root --bind-to none -np 1 -x NCCL_NVLS_ENABLE \
    -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "$BUILD/tests/llama2_logits_diff" \
    --model "$2" --against "$3" --backend cuda --against-backend cpu --dtype fp32 \
    --tolerance 1e-3 >"$TMP/$1.log" 2>&1
  local rc=$?
  echo "$1: rc=$rc $(grep '^RESULT' "$TMP/$1.log" || tail -3 "$TMP/$1.log")"
  return "$rc"
}
status=0
for v in linear4 dynamic4 none; do diff_run "$v" "$TMP/$v" "$TMP/$v" || status=1; done
if diff_run mismatch "$TMP/linear4" "$TMP/dynamic4"; then
  echo "mismatch: PASSED where it must fail: the comparison does not see the scaling"
  status=1
else
  echo "mismatch: failed as it must"
fi
exit "$status"
