#!/usr/bin/env bash
# What --deterministic (issue 41, docs/deterministic.md) costs on the CPU backend: generated tok/s
# of `llama2 batch` with and without the flag, at 1 and 4 ranks, on a small model.
#   usage: benchmarks/cpu_deterministic.sh [build dir] [model dir]     (prints a Markdown table)
# 64 prompts x 32 new tokens (greedy, ignore_eos), --max-batch-size 32 (batch's default); each
# cell is the median of 3 runs, the two sides alternating run by run so that a machine's drift
# falls on both. tok/s from the end of model loading to the last result, prefill included (the
# job's final progress line). The model defaults to models/docs-8m (8 layers, 256 hidden).
# At 1 and 2 ranks the flag changes nothing the engine runs (no all-reduce; a sum of two does not
# depend on its order), so 1 rank shows the noise of the machine; from 3 ranks on each all-reduce
# becomes an MPI_Allgather plus a sum in rank order. A run that prints no rate counts as 0.
set -euo pipefail
source "$(dirname "$0")/../launch/env.sh"
BUILD=${1:-$LLAMA2_BUILD}
MODEL=${2:-$LLAMA2_ROOT/models/docs-8m}
LLAMA2="$BUILD/llama2"
TMP=$(mktemp -d); trap 'rm -rf "$TMP"' EXIT
python3 -c 'import json
for i in range(64): print(json.dumps({"custom_id": f"p{i}", "prompt": f"Prompt number {i} about cats and dogs", "max_new_tokens": 32, "temperature": 0, "ignore_eos": True}))' >"$TMP/in.jsonl"
echo "$(date -u '+%Y-%m-%d %H:%M UTC'), $(hostname), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git -C "$LLAMA2_ROOT" rev-parse --short HEAD 2>/dev/null), $(basename "$MODEL")"
echo

run() {  # run NP [flag] -> generated tok/s after load
  rm -f "$TMP/out.jsonl"
  mpirun --oversubscribe --bind-to none -np "$1" "$LLAMA2" batch --model "$MODEL" --backend cpu \
    --input "$TMP/in.jsonl" --output "$TMP/out.jsonl" --quiet "${@:2}" 2>&1 >/dev/null |
    sed -n 's/.*64\/64 prompts done.*tokens, \([0-9.]*\) tok\/s.*/\1/p' | tail -1 | grep . || echo 0
}
ratio() { python3 -c "import sys; a, b = map(float, sys.argv[1:]); print(f'{b / a:.3f}' if a else 'n/a')" "$@"; }
median3() { printf '%s\n' "$@" | sort -n | sed -n 2p; }

echo "| ranks | default tok/s (3 runs) | --deterministic tok/s (3 runs) | deterministic / default (medians) |"
echo "| --- | --- | --- | --- |"
for np in 1 4; do
  a=() b=()
  for _ in 1 2 3; do
    a+=("$(run "$np")")
    b+=("$(run "$np" --deterministic)")
  done
  ma=$(median3 "${a[@]}") mb=$(median3 "${b[@]}")
  echo "| $np | $ma (${a[*]}) | $mb (${b[*]}) | $(ratio "$ma" "$mb") |"
done

# The engine alone (llama2_bench_cpu: decode steps of B sequences at context 64, no tokenizer,
# scheduler or output; each value the median of 5 repeats of 32 steps), where the all-reduces are a
# larger share of the time.
echo
echo "| ranks | batch | default us/step (3 runs) | --deterministic us/step (3 runs) | deterministic / default (medians) |"
echo "| --- | --- | --- | --- | --- |"
engine() {  # engine NP B [flag] -> us per step
  mpirun --oversubscribe --bind-to none -np "$1" "$BUILD/llama2_bench_cpu" --model "$MODEL" \
    --batches "$2" --context 64 --steps 32 --repeats 5 "${@:3}" 2>/dev/null |
    awk -F'|' -v b="$2" '$2 + 0 == b && NF > 3 { gsub(/ /, "", $3); print $3 }' | grep . || echo 0
}
for np in 4; do
  for b in 1 32; do
    a=() d=()
    for _ in 1 2 3; do
      a+=("$(engine "$np" "$b")")
      d+=("$(engine "$np" "$b" --deterministic)")
    done
    ma=$(median3 "${a[@]}") md=$(median3 "${d[@]}")
    echo "| $np | $b | $ma (${a[*]}) | $md (${d[*]}) | $(ratio "$ma" "$md") |"
  done
done
