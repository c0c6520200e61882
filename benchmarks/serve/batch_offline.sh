#!/usr/bin/env bash
# `llama2 batch` offline throughput on a GPU node (the issue 19 table's "batch offline" row): N
# prompts of P random token ids each (seeded, no shared prefix, so prefix caching finds nothing),
# M new tokens each (greedy, ignore_eos), 7B synthetic fp16 on one GPU, --max-batch-size B. The
# figure is the job's final progress line: generated tokens / seconds since the job started
# (after the model loaded), and the wall time of the whole command beside it.
#
#   bash benchmarks/serve/batch_offline.sh OUT_DIR
#
# Environment (optional): SKIP_BUILD=1 (use build-gpu/ as it is), SYNTHETIC=7b ("": the small
# test model itself, e.g. for a CPU check of this script, with VOCAB=512), VOCAB=32000 (token ids
# are drawn from [3, VOCAB)), N=1024, P=128,
# M=128, MAX_BATCH=512, PREFILL_CHUNK=2048, BATCH_ARGS (more `llama2 batch` flags, e.g.
# "--kv-cache-dtype fp8"), BATCH_ENV (mpirun -x flags). Writes OUT_DIR/{prompts,results}.jsonl,
# OUT_DIR/batch.log (stderr) and OUT_DIR/summary.txt; exits non-zero when the job fails or a
# result line is missing or short.
set -euo pipefail
OUT=${1:?usage: batch_offline.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.."
source launch/env.sh
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then bash benchmarks/gpu/build.sh llama2; fi
N=${N:-1024} P=${P:-128} M=${M:-128}

python3 - "$N" "$P" "$M" "${VOCAB:-32000}" >"$OUT/prompts.jsonl" <<'PY'
import json, random, sys
n, p, m, vocab = map(int, sys.argv[1:5])
rng = random.Random(1234)
for i in range(n):
    ids = [rng.randrange(3, vocab) for _ in range(p)]
    print(json.dumps({"custom_id": f"q{i}", "prompt_tokens": ids, "max_new_tokens": m,
                      "temperature": 0, "ignore_eos": True}))
PY
rm -f "$OUT/results.jsonl"
synthetic=(--synthetic "${SYNTHETIC-7b}")
[[ -z "${SYNTHETIC-7b}" ]] && synthetic=()
start=$EPOCHREALTIME
# shellcheck disable=SC2086  # BATCH_ARGS and BATCH_ENV are word lists
timeout 900 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 1 \
  -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS ${BATCH_ENV:-} \
  build-gpu/llama2 batch --model tests/models/small-d64 "${synthetic[@]}" \
  --input "$OUT/prompts.jsonl" --output "$OUT/results.jsonl" --max-batch-size "${MAX_BATCH:-512}" \
  --prefill-chunk "${PREFILL_CHUNK:-2048}" --progress-interval 5 ${BATCH_ARGS:-} 2>"$OUT/batch.log" ||
  echo "llama2 batch exited with $?" >&2
wall=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')

python3 - "$OUT/results.jsonl" "$N" "$M" "$wall" "$OUT/batch.log" <<'PY' | tee "$OUT/summary.txt"
import json, sys
path, n, m, wall, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
rows = [json.loads(line) for line in open(path) if line.strip()]
short = [r.get("custom_id") for r in rows if r.get("usage", {}).get("completion_tokens") != m]
last = [line for line in open(log) if line.startswith("batch: ")][-1].strip()
print(f"{len(rows)}/{n} results, {len(short)} without {m} tokens; last progress line: {last}; "
      f"whole command {wall} s (start-up included)")
ok = len(rows) == n and not short
print("RESULT batch_offline status=" + ("PASS" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
