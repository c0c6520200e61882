#!/usr/bin/env bash
# A restructuring's performance check on a GPU node: 7B synthetic serve saturation
# (saturation_ab.sh: 1024 requests at once, 128 + 128 tokens, --max-batch-size 512) for a baseline
# tree and this tree, alternating (baseline, current, baseline, current, ...) so that both sides see
# the same node state, each against a fresh server. The baseline is a plain copy of an older commit
# (e.g. `git archive BASE | tar -x -C bench-baseline`), built in its own build-gpu/.
#
#   bash benchmarks/serve/before_after.sh BASELINE_DIR OUT_DIR [ROUNDS]      (ROUNDS default 2)
#
# Writes OUT_DIR/{before,after}-<round>/ (saturation_ab.sh's files) and OUT_DIR/summary.txt (one
# line per run: side, round, output tok/s).
set -euo pipefail
BASE=${1:?usage: before_after.sh BASELINE_DIR OUT_DIR [ROUNDS]}
OUT=${2:?usage: before_after.sh BASELINE_DIR OUT_DIR [ROUNDS]}
ROUNDS=${3:-2}
BASE=$(cd "$BASE" && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "$0")/../.." && pwd)
# benchmarks/gpu/build.sh; a baseline older than its move has tests/gpu/node_build.sh instead.
for tree in "$BASE" "$HERE"; do
  build=benchmarks/gpu/build.sh
  [[ -f $tree/$build ]] || build=tests/gpu/node_build.sh
  (cd "$tree" && bash "$build" llama2)
done
for ((r = 1; r <= ROUNDS; r++)); do
  for side in before after; do
    tree=$HERE
    [[ $side == before ]] && tree=$BASE
    SKIP_BUILD=1 bash "$tree/benchmarks/serve/saturation_ab.sh" "$OUT/$side-$r" LLAMA2_MIXED_DECODE 1
    tps=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["results"]
r = r[0] if isinstance(r, list) else r
print(round(r["generated_tok_s"]))' "$OUT/$side-$r/LLAMA2_MIXED_DECODE=1.json")
    echo "$side round $r: $tps generated tok/s" | tee -a "$OUT/summary.txt"
  done
done
