#!/usr/bin/env bash
# `llama2 perplexity` against the Hugging Face reference (tests/reference/perplexity_reference.py)
# on the trained model, CPU fp32, within 1e-4 relative, at the rank counts given; then its
# definition's edge cases and bad input.
#   usage: perplexity.sh LLAMA2 MODELS_DIR MODEL_DIR FIXTURE TEXT "NPS"
source "$(dirname "$0")/lib.sh" "$1" "$2"
MODEL=$3
FIXTURE=$4
TEXT=$5
NPS=${6:-1 2}

# Every (context, stride) of the fixture at every rank count: same token count, perplexity within
# 1e-4 relative of HF's (fp32 on both sides: only summation order differs).
configs=$(python3 -c 'import json, sys
print(" ".join("%d:%d" % (r["context"], r["stride"]) for r in json.load(open(sys.argv[1]))["results"]))' "$FIXTURE")
[[ -n $configs ]] || fail "no (context, stride) configurations read from $FIXTURE"
# All pairs at the first rank count; at the others the chunked default (512:512, --chunk 256) and
# the uneven stride (100:37, several windows per step), to keep CI short.
first_np=${NPS%% *}
for np in $NPS; do
  cfgs=$configs
  [[ $np == "$first_np" ]] || cfgs=$(for c in $configs; do [[ $c == 512:512 || $c == 100:37 ]] && echo "$c"; done)
  for cfg in $cfgs; do
    n=${cfg%:*} s=${cfg#*:}
    name="np$np.N$n.S$s"
    run_capture "$name" "$np" perplexity --model "$MODEL" --backend cpu --text-file "$TEXT" \
      --context "$n" --stride "$s" --chunk 256 --json
    if [[ $(rc_of "$name") -ne 0 ]]; then
      fail "$name: exit $(rc_of "$name")"; sed 's/^/    /' "$TMP/$name.err"; continue
    fi
    if verdict=$(python3 - "$TMP/$name.out" "$FIXTURE" "$n" "$s" <<'PY'
import json, sys
ours = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
ref = next(r for r in json.load(open(sys.argv[2]))["results"]
           if r["context"] == int(sys.argv[3]) and r["stride"] == int(sys.argv[4]))
rel = abs(ours["perplexity"] - ref["perplexity"]) / ref["perplexity"]
same = all(ours[k] == ref[k] for k in ("tokens", "evaluated_tokens", "windows"))
print(f"ppl {ours['perplexity']:.6f} vs HF {ref['perplexity']:.6f} (relative {rel:.2e}), "
      f"{ours['evaluated_tokens']} tokens, {ours['windows']} windows"
      + ("" if same else f"; counts differ: ours {ours} HF {ref}"))
sys.exit(0 if same and rel <= 1e-4 else 1)
PY
    ); then pass "$name: $verdict"; else fail "$name: $verdict"; fi
  done
done

# The text output names the same figures.
run_capture text 1 perplexity --model "$MODEL" --backend cpu --text-file "$TEXT" --context 64
if [[ $(rc_of text) -eq 0 ]] && grep -q '^perplexity: ' "$TMP/text.out" && grep -q '^tokens evaluated: ' "$TMP/text.out"; then
  pass "text output: $(grep '^perplexity: ' "$TMP/text.out")"
else
  fail "text output"; cat "$TMP/text.out" "$TMP/text.err"
fi

# Bad input: one message naming the problem and the allowed values, non-zero exit.
run_capture bad_stride 2 perplexity --model "$MODEL" --backend cpu --text-file "$TEXT" --context 64 --stride 65
expect_failure bad_stride "--stride must be in \[1, --context = 64\]"
run_capture bad_context 2 perplexity --model "$MODEL" --backend cpu --text-file "$TEXT" --context 100000
expect_failure bad_context "--context must be in \[2, "
run_capture no_file 2 perplexity --model "$MODEL" --backend cpu --text-file "$TMP/missing.txt"
expect_failure no_file "--text-file: cannot open"
printf '' > "$TMP/empty.txt"
run_capture empty 2 perplexity --model "$MODEL" --backend cpu --text-file "$TMP/empty.txt"
expect_failure empty "gives fewer than 2 tokens"
run_capture no_text 1 perplexity --model "$MODEL"
if [[ $(rc_of no_text) -eq 2 ]] && grep -q -- "--text-file is required" "$TMP/no_text.err"; then
  pass "missing --text-file: usage error (exit 2)"
else
  fail "missing --text-file: exit $(rc_of no_text)"
fi
finish
