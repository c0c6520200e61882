#!/usr/bin/env bash
# Prefix caching in `llama2 batch` (issue 19) under mpirun -np 2 on the CPU backend: prompts that
# share a 100-token prefix give bit-identical greedy tokens with the cache on (the default) and off
# (--no-prefix-caching; both spellings and their conflict: unit suite engine_config), also through
# a cache small enough that cached blocks are evicted; the summary line counts the reused prompt
# tokens exactly; a bad value is named.
source "$(dirname "$0")/lib.sh" "$@"
M="$MODELS/tiny-gqa"

# 8 prompts: two 100-token prefixes (A, B) alternating, each with its own 3-token tail.
python3 - "$TMP/shared.jsonl" <<'PY'
import json, random, sys
rng = random.Random(19)
prefix = {f: [rng.randrange(3, 500) for _ in range(100)] for f in "AB"}
with open(sys.argv[1], "w") as f:
    for i in range(8):
        fam = "AB"[i % 2]
        f.write(json.dumps({"custom_id": f"{fam}{i}", "prompt_tokens": prefix[fam] + [10 + i, 11, 12],
                            "max_new_tokens": 12, "temperature": 0, "ignore_eos": True}) + "\n")
PY
# --max-batch-size 2: later prompts are admitted after earlier ones computed the prefix.
common=(--model "$M" --input "$TMP/shared.jsonl" --quiet)
run_capture on 2 batch "${common[@]}" --output "$TMP/on.jsonl" --max-batch-size 2 --kv-cache-blocks 64
run_capture off 2 batch "${common[@]}" --output "$TMP/off.jsonl" --max-batch-size 2 --kv-cache-blocks 64 --no-prefix-caching
# Under pressure: one prompt at a time in 12 blocks. A prompt takes 8 (115 positions), so each one
# evicts 3 blocks of the other prefix's chain, deepest first, and the next prompt of that prefix
# finds only its first 4 blocks (64 tokens): 6 x 64 hit tokens.
run_capture small 2 batch "${common[@]}" --output "$TMP/small.jsonl" --max-batch-size 1 --kv-cache-blocks 12
for r in on off small; do
  [[ $(rc_of $r) -eq 0 ]] || { fail "$r: exit $(rc_of $r)"; sed 's/^/    /' "$TMP/$r.err"; }
done
python3 - "$TMP"/{off,on,small}.jsonl <<'PY' && pass "greedy tokens identical: on, off, on with a 12-block cache" || fail "outputs differ"
import json, sys
runs = [{r["custom_id"]: r["token_ids"] for r in map(json.loads, open(p))} for p in sys.argv[1:]]
assert len(runs[0]) == 8 and all(len(t) == 12 for t in runs[0].values()), runs[0]
for other in runs[1:]:
    assert other == runs[0], (sys.argv, other, runs[0])
PY
# The summary: 8 x 103 prompt tokens queried; prompts after the first of a prefix reuse 96
# each (6 full blocks; the block of the last prompt token is computed).
summary() { grep -o 'prefix cache: [0-9]* of [0-9]* prompt tokens reused.*' "$TMP/$1.err"; }
read -r hit queried evicted < <(summary on | awk '{print $3, $5, $10}')
[[ $queried -eq 824 && $hit -ge 576 ]] && pass "on: $(summary on)" || fail "on: summary '$(summary on)'"
read -r hit_s queried_s evicted_s < <(summary small | awk '{print $3, $5, $10}')
[[ $queried_s -eq 824 && $evicted_s -gt 0 && $hit_s -eq 384 ]] && pass "12 blocks: $(summary small)" || fail "12 blocks: summary '$(summary small)'"
[[ -z $(summary off) ]] && pass "off: no prefix cache summary" || fail "off printed a summary"

run_capture bad 1 batch --model "$M" --input "$TMP/shared.jsonl" --output "$TMP/bad.jsonl" --prefix-caching maybe
expect_failure bad "prefix-caching must be one of on, off (got \"maybe\")"
finish
