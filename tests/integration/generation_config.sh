#!/usr/bin/env bash
# generation_config.json's sampling defaults (issue 37): a copy of tiny-gqa whose file says
# {"temperature": 0, "max_new_tokens": 5} generates 5 greedy tokens when the command line sets
# neither (the tokens of --temperature 0 -n 5 on the original folder), a flag given wins over the
# file, --generation-config ignore keeps the built-in defaults (128 sampled tokens), a batch line
# without sampling keys takes the file's values, the start-up report says which defaults apply,
# and a bad value or mode stops every rank with one message. About 15 s.
#   usage: generation_config.sh LLAMA2 MODELS
source "$(dirname "$0")/lib.sh" "$@"
M="$TMP/gen"
cp -r "$MODELS/tiny-gqa" "$M"
cat >"$M/generation_config.json" <<'JSON'
{"bos_token_id": 1, "eos_token_id": 2, "do_sample": true, "temperature": 0, "max_new_tokens": 5,
 "max_length": 4096, "transformers_version": "4.31.0"}
JSON
PROMPT="The quick brown fox"
ids() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token_ids"])' "$TMP/$1.out"; }
count() { python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["token_ids"]))' "$TMP/$1.out"; }
note() {  # note NAME TEXT: TEXT on NAME's stderr
  if grep -qF -- "$2" "$TMP/$1.err"; then pass "$1 report: $2"
  else fail "$1: no '$2' in the report:"; sed 's/^/    /' "$TMP/$1.err"; fi
}

run_capture plain 2 generate --model "$MODELS/tiny-gqa" --json --quiet --prompt "$PROMPT" \
  --temperature 0 -n 5 --ignore-eos
run_capture file 2 generate --model "$M" --json --prompt "$PROMPT" --ignore-eos
if [[ $(ids file) == "$(ids plain)" && $(count file) -eq 5 ]]; then
  pass "the file's temperature 0 and max_new_tokens 5: $(ids file)"
else fail "with the file's defaults $(ids file), want $(ids plain)"; fi
note file "sampling defaults from generation_config.json: temperature 0, max_new_tokens 5"

run_capture flag 2 generate --model "$M" --json --prompt "$PROMPT" --ignore-eos -n 7
[[ $(count flag) -eq 7 ]] && pass "-n 7 wins over the file's 5" || fail "-n 7 gave $(count flag) tokens"
note flag "temperature 0 (--max-new-tokens given on the command line)"

run_capture ignore 2 generate --model "$M" --json --prompt "$PROMPT" --ignore-eos --seed 3 \
  --generation-config ignore
[[ $(count ignore) -eq 128 ]] && pass "ignore: the built-in 128 tokens" || fail "ignore gave $(count ignore) tokens"
note ignore "sampling defaults: the built-in ones (--generation-config ignore)"
run_capture none 1 generate --model "$MODELS/tiny-gqa" --json --prompt "$PROMPT" -n 2
note none "sampling defaults: the built-in ones (generation_config.json sets none)"

echo '{"custom_id": "a", "prompt": "The quick brown fox", "ignore_eos": true}' >"$TMP/in.jsonl"
run_capture batch 2 batch --model "$M" --input "$TMP/in.jsonl" --output "$TMP/out.jsonl"
got=$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["token_ids"])' "$TMP/out.jsonl")
[[ $got == "$(ids plain)" ]] && pass "batch line: the file's defaults: $got" || fail "batch line $got"

for bad in '{"temperature": -1}' '{"top_p": 1.5}' '{"top_k": "40"}' '{"max_new_tokens": 0}'; do
  echo "$bad" >"$M/generation_config.json"
  key=$(python3 -c 'import json,sys; print(list(json.loads(sys.argv[1]))[0])' "$bad")
  run_capture "bad_$key" 2 generate --model "$M" --prompt hi -n 2
  expect_failure "bad_$key" "gen/generation_config.json: \"$key\" must be"
done
run_capture mode 2 generate --model "$M" --prompt hi --generation-config maybe
expect_failure mode "--generation-config must be auto or ignore (got 'maybe')"
finish
