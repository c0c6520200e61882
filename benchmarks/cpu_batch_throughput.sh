#!/usr/bin/env bash
# CPU-backend batch throughput: generated tok/s of `llama2 batch` at several --max-batch-size values
# and rank counts, for the committed tiny model and a larger random model whose weights (59 MB)
# do not fit in the CPU caches (where batching pays off, as it does on GPUs).
#   usage: benchmarks/cpu_batch_throughput.sh [build dir]        (prints a Markdown table)
# Each cell is the median of 3 runs of P prompts x 64 new tokens (greedy, ignore_eos; P = 256 for
# the tiny model, whose runs are otherwise a few tens of milliseconds, 32 for the larger one), in
# generated tokens per second from the end of model loading to the last result (prefill included).
# Ranks run unbound (--bind-to none, as launch/llama2-mpirun does), so --cpu-threads' automatic
# choice gives each rank its share of the cores. The tiny model's weights fit in a core's L2, so
# its batched steps are split by sequence across threads (LLAMA2_CPU_SPLIT=auto); one more row
# for it adds LLAMA2_CPU_SPLIT=columns (each operator split instead) for comparison. A second table
# times the engine alone (llama2_bench_cpu: decode steps without tokenizer, scheduler or output).
set -euo pipefail
source "$(dirname "$0")/../launch/env.sh"
BUILD=${1:-$LLAMA2_BUILD}
LLAMA2="$BUILD/llama2"
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
"$LLAMA2" make-test-model --out "$TMP/bench-model" --hidden-size 512 --intermediate-size 1376 \
  --layers 4 --heads 8 --vocab 2048 --force >/dev/null
for n in 32 256; do
  python3 -c 'import json, sys
for i in range(int(sys.argv[1])): print(json.dumps({"custom_id": f"p{i}", "prompt": f"Prompt number {i} about cats and dogs", "max_new_tokens": 64, "temperature": 0, "ignore_eos": True}))' $n >"$TMP/in$n.jsonl"
done
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname), $(nproc) CPUs ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), commit $(git -C "$LLAMA2_ROOT" rev-parse --short HEAD 2>/dev/null)"
echo

run() {  # run MODEL NP B PROMPTS [env...] -> generated tok/s after load (the job's final progress line)
  rm -f "$TMP/out.jsonl"
  env "${@:5}" mpirun --oversubscribe --bind-to none -np "$2" "$LLAMA2" batch --model "$1" \
    --input "$TMP/in$4.jsonl" --output "$TMP/out.jsonl" --max-batch-size "$3" --backend cpu --quiet 2>&1 >/dev/null |
    sed -n "s/.*$4\/$4 prompts done.*tokens, \([0-9.]*\) tok\/s.*/\1/p" | tail -1
}
median3() { printf '%s\n' "$@" | sort -n | sed -n 2p; }

echo "| model | ranks | split | batch 1 | batch 8 | batch 32 | batch 8 / batch 1 |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for model in "$LLAMA2_ROOT/tests/models/tiny-gqa" "$TMP/bench-model"; do
  prompts=32 cfgs=("1 auto" "2 auto")
  [[ $model == *tiny-gqa ]] && prompts=256 cfgs+=("1 columns")
  for cfg in "${cfgs[@]}"; do
    read -r np split <<<"$cfg"
    row=()
    for b in 1 8 32; do
      r=(); for _ in 1 2 3; do r+=("$(run "$model" "$np" "$b" "$prompts" LLAMA2_CPU_SPLIT="$split")"); done
      row+=("$(median3 "${r[@]}")")
    done
    ratio=$(python3 -c "print(f'{${row[1]}/${row[0]}:.2f}x')")
    echo "| $(basename "$model") | $np | $split | ${row[0]} | ${row[1]} | ${row[2]} | $ratio |"
  done
done

echo
for model in "$LLAMA2_ROOT/tests/models/tiny-gqa" "$TMP/bench-model"; do
  echo "engine only, $(basename "$model"):"
  mpirun --oversubscribe --bind-to none -np 1 "$BUILD/llama2_bench_cpu" --model "$model" \
    --batches 1,8,32 --context 64 --steps 64 --repeats 5 2>/dev/null
done
