#!/usr/bin/env bash
# CPU-backend batch throughput: generated tok/s of `llama2 batch` at several --max-batch-size values
# and rank counts, for the committed tiny model and a larger random model whose weights (59 MB)
# do not fit in the CPU caches (where batching pays off, as it does on GPUs).
#   usage: benchmarks/cpu_batch_throughput.sh [build dir]        (prints a Markdown table)
# Each cell is the median of 3 runs of 32 prompts x 64 new tokens (greedy, ignore_eos), in generated
# tokens per second from the end of model loading to the last result (prefill included).
# Ranks run unbound (--bind-to none, as launch/llama2-mpirun does), so --cpu-threads' automatic
# choice gives each rank its share of the cores. A second table times the engine alone
# (llama2_bench_cpu: decode steps without tokenizer, scheduler or output).
set -euo pipefail
source "$(dirname "$0")/../launch/env.sh"
BUILD=${1:-$LLAMA2_BUILD}
LLAMA2="$BUILD/llama2"
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
"$LLAMA2" make-test-model --out "$TMP/bench-model" --hidden-size 512 --intermediate-size 1376 \
  --layers 4 --heads 8 --vocab 2048 --force >/dev/null
python3 -c 'import json
for i in range(32): print(json.dumps({"custom_id": f"p{i}", "prompt": f"Prompt number {i} about cats and dogs", "max_new_tokens": 64, "temperature": 0, "ignore_eos": True}))' >"$TMP/in.jsonl"

run() {  # run MODEL NP B -> generated tok/s after load (the job's final progress line)
  rm -f "$TMP/out.jsonl"
  mpirun --oversubscribe --bind-to none -np "$2" "$LLAMA2" batch --model "$1" --input "$TMP/in.jsonl" \
    --output "$TMP/out.jsonl" --max-batch-size "$3" --backend cpu --quiet 2>&1 >/dev/null |
    sed -n 's/.*32\/32 prompts done.*tokens, \([0-9.]*\) tok\/s.*/\1/p' | tail -1
}
median3() { printf '%s\n' "$@" | sort -n | sed -n 2p; }

echo "| model | ranks | batch 1 | batch 8 | batch 32 | batch 8 / batch 1 |"
echo "| --- | --- | --- | --- | --- | --- |"
for model in "$LLAMA2_ROOT/tests/models/tiny-gqa" "$TMP/bench-model"; do
  for np in 1 2; do
    row=()
    for b in 1 8 32; do row+=("$(median3 "$(run "$model" $np $b)" "$(run "$model" $np $b)" "$(run "$model" $np $b)")"); done
    ratio=$(python3 -c "print(f'{${row[1]}/${row[0]}:.2f}x')")
    echo "| $(basename "$model") | $np | ${row[0]} | ${row[1]} | ${row[2]} | $ratio |"
  done
done

echo
for model in "$LLAMA2_ROOT/tests/models/tiny-gqa" "$TMP/bench-model"; do
  echo "engine only, $(basename "$model"):"
  mpirun --oversubscribe --bind-to none -np 1 "$BUILD/llama2_bench_cpu" --model "$model" \
    --batches 1,8,32 --context 64 --steps 64 --repeats 5 2>/dev/null
done
