#!/usr/bin/env bash
# rope_scaling through the command line (issue 37): tiny-gqa with config.json's rope_scaling
# {"type": "dynamic", "factor": 2.0} and max_position_embeddings 42, as the committed
# transformers fixture was made (tests/reference/make_rope_fixtures.py): `llama2 generate` at 1
# and 2 ranks continues a 38-token prompt past position 42 with transformers' greedy tokens, the
# start-up report says prefix caching is off, and YaRN / llama3 configs stop every rank with one
# message. About 10 s.
#   usage: rope_scaling.sh LLAMA2 MODELS
source "$(dirname "$0")/lib.sh" "$@"
FIXTURE=$(dirname "$0")/../reference/fixtures/rope/tiny-gqa.rope-dynamic2.json

with_rope() {  # with_rope NAME JSON_FOR_rope_scaling
  rm -rf "$TMP/$1"; cp -r "$MODELS/tiny-gqa" "$TMP/$1"
  python3 - "$TMP/$1/config.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_scaling"] = json.loads(sys.argv[2])
c["max_position_embeddings"] = 42
json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
}
with_rope dynamic '{"type": "dynamic", "factor": 2.0}'
text=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["prompts"][0]["text"])' "$FIXTURE")
want=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["prompts"][0]["greedy"])' "$FIXTURE")
for np in 1 2; do
  run_capture "dynamic.np$np" $np generate --model "$TMP/dynamic" --json --prompt "$text" -n 32 \
    --ignore-eos --temperature 0
  got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token_ids"])' "$TMP/dynamic.np$np.out" 2>/dev/null)
  if [[ $got == "$want" ]]; then pass "dynamic x2 np=$np: transformers' greedy past position 42: $got"
  else fail "dynamic x2 np=$np: $got != transformers' $want"; sed 's/^/    /' "$TMP/dynamic.np$np.err"; fi
done
if grep -q "prefix caching off: dynamic RoPE scaling" "$TMP/dynamic.np2.err"; then
  pass "start-up report: prefix caching off under dynamic scaling"
else
  fail "no prefix-caching note:"; sed 's/^/    /' "$TMP/dynamic.np2.err"
fi
# The context is the original length x factor: 84 tokens; 38 + 47 is refused.
run_capture too_long 1 generate --model "$TMP/dynamic" --prompt "$text" -n 47 --ignore-eos
expect_failure too_long "84"

with_rope yarn '{"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 42}'
run_capture yarn 2 generate --model "$TMP/yarn" --prompt "hello" -n 2
expect_failure yarn 'rope type "yarn" (YaRN) is not supported'
with_rope llama3 '{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}'
run_capture llama3 2 generate --model "$TMP/llama3" --prompt "hello" -n 2
expect_failure llama3 "Llama 3.1's scaling"
finish
