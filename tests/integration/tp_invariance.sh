#!/usr/bin/env bash
# The same request under 1, 2 and 4 ranks gives the same tokens: greedy, and seeded sampling.
source "$(dirname "$0")/lib.sh" "$@"

for model in tiny-gqa tiny-mha; do
  # greedy and topk gather per-rank candidates (StepPlan::candidates); sampled needs full logits
  # (repetition penalty, top-p over the vocabulary).
  for mode in greedy topk sampled; do
    case $mode in
      greedy) flags=(--temperature 0) ;;
      topk) flags=(--temperature 0.9 --top-k 20 --seed 11) ;;
      *) flags=(--temperature 0.8 --top-k 40 --top-p 0.95 --repetition-penalty 1.1 --seed 7) ;;
    esac
    for np in 1 2 4; do
      run_capture "$model.$mode.np$np" $np generate --model "$MODELS/$model" --quiet --json \
        --prompt "Café au lait, 北京, and a 🦊." -n 24 --ignore-eos "${flags[@]}"
      [[ $(rc_of "$model.$mode.np$np") -eq 0 ]] || fail "$model $mode np=$np exited $(rc_of "$model.$mode.np$np")"
    done
    ids1=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token_ids"])' "$TMP/$model.$mode.np1.out")
    for np in 2 4; do
      idsn=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token_ids"])' "$TMP/$model.$mode.np$np.out")
      if [[ "$ids1" == "$idsn" && -n "$ids1" ]]; then pass "$model $mode np=1 == np=$np: $ids1"
      else fail "$model $mode np=1 $ids1 != np=$np $idsn"; fi
    done
  done
done

# The candidate gather gives the tokens the full-logit gather gives (LLAMA2_FULL_LOGITS=1 forces
# full rows), greedy and top-k, at 2 ranks.
for mode in greedy topk; do
  if [[ $mode == greedy ]]; then flags=(--temperature 0); else flags=(--temperature 0.9 --top-k 20 --seed 11); fi
  LLAMA2_FULL_LOGITS=1 run_capture "full.$mode" 2 generate --model "$MODELS/tiny-gqa" --quiet --json \
    --prompt "Café au lait, 北京, and a 🦊." -n 24 --ignore-eos "${flags[@]}"
  full=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token_ids"])' "$TMP/full.$mode.out")
  cand=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token_ids"])' "$TMP/tiny-gqa.$mode.np2.out")
  if [[ "$full" == "$cand" && -n "$full" ]]; then pass "$mode: candidates == full logits: $full"
  else fail "$mode: candidates $cand != full logits $full"; fi
done

# Streaming text equals the --json text (same seed), byte for byte.
run_capture stream 2 generate --model "$MODELS/tiny-gqa" --quiet --prompt "Hola señor, 你好 🙂" -n 40 --seed 3 --ignore-eos
run_capture json 2 generate --model "$MODELS/tiny-gqa" --quiet --json --prompt "Hola señor, 你好 🙂" -n 40 --seed 3 --ignore-eos
python3 - "$TMP/stream.out" "$TMP/json.out" <<'PY' && pass "streamed text == --json text" || fail "streamed text differs from --json text"
import json, sys
streamed = open(sys.argv[1], "rb").read()
text = json.loads(open(sys.argv[2], encoding="utf-8").read())["text"].encode("utf-8")
sys.exit(0 if streamed == text + b"\n" else 1)
PY
finish
