#!/usr/bin/env bash
# Serving at saturation on a GPU node, once per value of one environment variable (an A/B of an
# engine switch), each against a fresh server: 7B synthetic fp16, 1024 requests sent at once,
# 128-token prompts, 128 new tokens (the RESULTS.md saturation row).
#
#   bash benchmarks/serve/saturation_ab.sh OUT_DIR [VAR] [VALUES]
#   e.g. bash benchmarks/serve/saturation_ab.sh /tmp/ab LLAMA2_MIXED_DECODE "0 1"
#
# Environment (optional): NP=1 (ranks = GPUs), MAX_BATCH=512, PREFILL_CHUNK=2048, REQUESTS=1024,
# MAX_NEW=128 (new tokens per request), EXTRA (a JSON object of request fields, bench_serve.py --extra),
# RATES=inf (bench_serve.py --rates: e.g. RATES=56 for Poisson arrivals at half of saturation),
# SYNTHETIC=7b (13b, 70b), TOKENIZER_DIR=tests/models/small-d64 (where the tokenizer comes from;
# the weights are synthetic), SERVE_ARGS (more `llama2 serve` flags, e.g. "--kv-cache-dtype fp8"),
# SKIP_BUILD=1 (use build-gpu/ as it is), BUILD_DIR=build-gpu (the build whose llama2 serves: an
# A/B of two builds). Writes OUT_DIR/<VAR>=<value>.{json,log,server.log}, the
# server's per-step log (LLAMA2_STEP_LOG) <VAR>=<value>.steps and its summary by step kind
# <VAR>=<value>.steps.md (benchmarks/serve/step_log_summary.py).
set -euo pipefail
OUT_DIR=${1:?usage: saturation_ab.sh OUT_DIR [VAR] [VALUES]}
VAR=${2:-LLAMA2_MIXED_DECODE}
VALUES=${3:-"0 1"}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
cd "$(dirname "$0")/../.."
source launch/env.sh
NP=${NP:-1}
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then bash benchmarks/gpu/build.sh llama2; fi

for value in $VALUES; do
  tag="$VAR=$value"
  sock=$(mktemp -u /tmp/llama2-ab.XXXXXX.sock)
  rm -f "$OUT_DIR/$tag.steps"
  # mpirun -x forwards the switch to every rank; the multicast policy variables always.
  timeout 900 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$NP" \
    -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS \
    -x "$VAR=$value" -x "LLAMA2_STEP_LOG=$OUT_DIR/$tag.steps" "${BUILD_DIR:-build-gpu}/llama2" serve --model "${TOKENIZER_DIR:-tests/models/small-d64}" --synthetic "${SYNTHETIC:-7b}" \
    --socket "$sock" --max-batch-size "${MAX_BATCH:-512}" --max-queue 4096 \
    --prefill-chunk "${PREFILL_CHUNK:-2048}" ${SERVE_ARGS:-} >"$OUT_DIR/$tag.server.log" 2>&1 &
  server=$!
  started=$EPOCHREALTIME
  for _ in $(seq 600); do [[ -S "$sock" ]] && break; sleep 0.2; done
  [[ -S "$sock" ]] || { echo "$tag: server did not start" >&2; cat "$OUT_DIR/$tag.server.log" >&2; exit 1; }
  echo "$tag: server listening after $(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
  python3 benchmarks/serve/bench_serve.py --socket "$sock" --rates "${RATES:-inf}" \
    --requests "${REQUESTS:-1024}" --prompt-len 128 --max-new-tokens "${MAX_NEW:-128}" \
    ${EXTRA:+--extra "$EXTRA"} --json "$OUT_DIR/$tag.json" 2>&1 | tee "$OUT_DIR/$tag.log"
  kill -INT "$server" 2>/dev/null || true
  wait "$server" || true
  python3 benchmarks/serve/step_log_summary.py "$OUT_DIR/$tag.steps" | tee "$OUT_DIR/$tag.steps.md"
done
