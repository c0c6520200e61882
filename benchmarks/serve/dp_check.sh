#!/usr/bin/env bash
# Data parallelism's one-GPU checks (issue 16) on a GPU node, from the repository root:
#  1. -np 1 --tp 1 saturation against the tree before data parallelism, alternating rounds
#     (before_after.sh: 7B synthetic fp16, 1024 requests at once, 128 + 128 tokens): the target is
#     within 2%;
#  2. the same saturation at -np 1 with an explicit `--tp 1` (the flag itself changes nothing);
#  3. -np 2 --dedicated-front: rank 0 is the front only, rank 1 the one GPU replica, so every
#     request and token event crosses MPI (the cost of the front <-> leader path) — compare with 2;
#  4. the front's own work per token event on this node's CPU (llama2_bench_replica_wire).
#
#   bash benchmarks/serve/dp_check.sh OUT_DIR [BASE_COMMIT]    (BASE_COMMIT default: the merge
#                                                               base with main, i.e. before #16)
# Writes OUT_DIR/before_after/summary.txt, OUT_DIR/tp1/, OUT_DIR/front/, OUT_DIR/wire.md and
# OUT_DIR/summary.txt (generated tok/s of each run).
set -euo pipefail
OUT=${1:?usage: dp_check.sh OUT_DIR [BASE_COMMIT]}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.."
BASE_COMMIT=${2:-$(git merge-base HEAD main)}
BASE_DIR=$OUT/baseline-src
rm -rf "$BASE_DIR" && mkdir -p "$BASE_DIR"
git archive "$BASE_COMMIT" | tar -x -C "$BASE_DIR"
echo "baseline: $BASE_COMMIT" | tee "$OUT/baseline.txt"
bash benchmarks/serve/before_after.sh "$BASE_DIR" "$OUT/before_after" 2
SKIP_BUILD=1 NP=1 SERVE_ARGS="--tp 1" bash benchmarks/serve/saturation_ab.sh "$OUT/tp1" LLAMA2_MIXED_DECODE 1
SKIP_BUILD=1 NP=2 SERVE_ARGS="--dedicated-front" \
  bash benchmarks/serve/saturation_ab.sh "$OUT/front" LLAMA2_MIXED_DECODE 1
ninja -C build-gpu llama2_bench_replica_wire >/dev/null
build-gpu/llama2_bench_replica_wire | tee "$OUT/wire.md"
tps() { python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["results"]
r = r[0] if isinstance(r, list) else r
print(round(r["generated_tok_s"]))' "$1"; }
{
  cat "$OUT/before_after/summary.txt"
  echo "np1 --tp 1: $(tps "$OUT/tp1/LLAMA2_MIXED_DECODE=1.json") generated tok/s"
  echo "np2 --dedicated-front: $(tps "$OUT/front/LLAMA2_MIXED_DECODE=1.json") generated tok/s"
} | tee "$OUT/summary.txt"
