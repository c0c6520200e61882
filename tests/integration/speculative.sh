#!/usr/bin/env bash
# Speculative decoding, n-gram proposer (issue 39; docs/speculative.md), `generate` and `batch`
# under mpirun at TP 1, 2 and 4 on models/docs-8m (CPU): greedy tokens with --speculative equal
# those without, token for token, on a quoting workload (a passage followed by its first sentence
# again: many proposals accepted, asserted > 0) and free generation; stop strings and
# max_new_tokens landing inside an accepted run; logprobs and top_logprobs bit-equal (the JSON
# floats read back to the same bits); penalties, logit_bias and min_tokens exact; the per-line
# opt-out; prefix-cache reuse after rejected proposals; seeded sampling reproducible; bad specs
# refused at start with the allowed forms.
#   usage: speculative.sh LLAMA2 MODELS
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
M=$MODELS/docs-8m
PASSAGE="The SELECT statement retrieves rows from one or more tables. A WHERE clause filters the rows, and an ORDER BY clause sorts them. The result is a table of its own."
QUOTE="$PASSAGE The SELECT statement retrieves rows"

# Lines: quoting and free prompts, a stop string and a max_new_tokens inside the quote, logprobs,
# penalties, logit_bias + min_tokens, an opt-out, seeded sampling; two prompts sharing a prefix.
python3 - "$TMP/in.jsonl" "$QUOTE" "$PASSAGE" <<'PY'
import json, sys
quote, passage = sys.argv[2], sys.argv[3]
g = {"temperature": 0, "max_new_tokens": 40, "ignore_eos": True}
lines = [
    dict(g, custom_id="quote", prompt=quote),
    dict(g, custom_id="free", prompt="Python is a programming language that"),
    dict(g, custom_id="stop", prompt=quote, stop=["is a SELECT"]),
    dict(g, custom_id="maxtok", prompt=quote, max_new_tokens=7),
    dict(g, custom_id="logprobs", prompt=quote, logprobs=True, top_logprobs=3),
    dict(g, custom_id="logprobs_free", prompt="Python is a programming language that",
         logprobs=True, top_logprobs=2),
    dict(g, custom_id="penalties", prompt=quote, repetition_penalty=1.2, presence_penalty=0.5,
         frequency_penalty=0.3),
    dict(g, custom_id="bias", prompt=quote, logit_bias={"13": 2.5}, min_tokens=5, ignore_eos=False),
    dict(g, custom_id="optout", prompt=quote, speculative=False),
    dict(custom_id="sampled", prompt=quote, temperature=0.8, top_p=0.9, seed=7, max_new_tokens=30),
    dict(g, custom_id="prefix1", prompt=passage + " " + passage),
    dict(g, custom_id="prefix2", prompt=passage + " " + passage + " A WHERE"),
]
with open(sys.argv[1], "w") as f:
    for l in lines: f.write(json.dumps(l) + "\n")
PY

for np in 1 2 4; do
  # generate: the quoting workload, plain and with a stop string inside the repeated run.
  run_capture gen_off$np $np generate --model "$M" --prompt "$QUOTE" --temperature 0 -n 48 --json --quiet
  run_capture gen_on$np $np generate --model "$M" --prompt "$QUOTE" --temperature 0 -n 48 --json --quiet --speculative ngram:5
  # (The stop-string run at TP 2 only, the reproducibility run below at TP 1 only: CI time.)
  runs=(gen_off gen_on)
  if [[ $np -eq 2 ]]; then
    run_capture gstop_off$np $np generate --model "$M" --prompt "$QUOTE" --temperature 0 -n 48 --json --quiet --stop "is a SELECT"
    run_capture gstop_on$np $np generate --model "$M" --prompt "$QUOTE" --temperature 0 -n 48 --json --quiet --stop "is a SELECT" --speculative ngram:8:1
    runs+=(gstop_off gstop_on)
  fi
  for r in "${runs[@]}"; do
    [[ $(rc_of $r$np) -eq 0 ]] || { fail "$r$np: exit $(rc_of $r$np)"; sed 's/^/    /' "$TMP/$r$np.err"; }
  done
  if python3 - "$TMP"/{gen_off,gen_on,gstop_off,gstop_on}$np.out >"$TMP/g$np.txt" 2>&1 <<'PY'
import json, os, sys
off, on, soff, son = (json.loads(open(p).read().splitlines()[-1]) if os.path.exists(p) else None
                      for p in sys.argv[1:])
assert on["token_ids"] == off["token_ids"], (on["token_ids"], off["token_ids"])
spec = on["speculative"]
assert spec["status"] == "on" and spec["accepted_tokens"] > 0, spec
assert "speculative" not in off
print(f"{len(on['token_ids'])} tokens, {spec['accepted_tokens']} of {spec['proposed_tokens']} "
      f"proposed accepted in {spec['verify_steps']} verify steps", end="")
if son is not None:
    assert son["token_ids"] == soff["token_ids"] and son["text"] == soff["text"], (son, soff)
    assert son["finish_reason"] == "stop" and son["speculative"]["accepted_tokens"] > 0, son
    print(f"; a stop string inside an accepted run ends both after {len(son['token_ids'])} tokens", end="")
PY
  then pass "generate np$np: greedy tokens equal with ngram:5; $(cat "$TMP/g$np.txt")"
  else fail "generate np$np:"; cat "$TMP/g$np.txt"; fi

  # batch: every line equal with and without speculation (the sampled one: reproducible).
  common=(--model "$M" --input "$TMP/in.jsonl" --quiet --max-batch-size 4 --kv-cache-blocks 128)
  run_capture b_off$np $np batch "${common[@]}" --output "$TMP/off$np.jsonl"
  run_capture b_on$np $np batch "${common[@]}" --output "$TMP/on$np.jsonl" --speculative ngram:4:1
  runs=(b_off$np b_on$np)
  if [[ $np -eq 1 ]]; then
    run_capture b_on2_$np $np batch "${common[@]}" --output "$TMP/on2_$np.jsonl" --speculative ngram:4:1
    runs+=(b_on2_$np)
  fi
  for r in "${runs[@]}"; do
    [[ $(rc_of $r) -eq 0 ]] || { fail "$r: exit $(rc_of $r)"; sed 's/^/    /' "$TMP/$r.err"; }
  done
  if python3 - "$TMP/off$np.jsonl" "$TMP/on$np.jsonl" "$TMP/on2_$np.jsonl" >"$TMP/b$np.txt" 2>&1 <<'PY'
import json, os, sys
off, on, on2 = ({j["custom_id"]: j for j in map(json.loads, open(p))} if os.path.exists(p) else None
                for p in sys.argv[1:])
assert len(off) == len(on) == 12, (len(off), len(on))
for cid, a in off.items():
    b = on[cid]
    if cid == "sampled":
        assert on2 is None or on2[cid]["token_ids"] == b["token_ids"], "seeded sampling not reproducible"
        continue
    assert b["token_ids"] == a["token_ids"], (cid, b["token_ids"], a["token_ids"])
    assert b["text"] == a["text"] and b["finish_reason"] == a["finish_reason"], cid
assert on["stop"]["finish_reason"] == "stop" and len(on["stop"]["token_ids"]) < 40
assert len(on["maxtok"]["token_ids"]) == 7
assert on["optout"]["speculative"] == {"status": "opted_out"}, on["optout"]
for cid in ("quote", "stop", "logprobs", "bias"):
    assert on[cid]["speculative"]["accepted_tokens"] > 0, (cid, on[cid]["speculative"])
print(", ".join(f"{c} {on[c]['speculative']['accepted_tokens']}/{on[c]['speculative']['proposed_tokens']}"
                for c in on if on[c]["speculative"]["status"] == "on"))
PY
  then pass "batch np$np: 11 greedy lines equal, sampled reproducible; accepted/proposed: $(cat "$TMP/b$np.txt")"
  else fail "batch np$np:"; cat "$TMP/b$np.txt"; fi
  # logprobs bit-equal: the logprobs lines alone (a step's other rows decide whether its rows come
  # back as candidates or full rows, whose log-sum-exp differs in the last bits at TP > 1).
  grep '"logprobs"' "$TMP/in.jsonl" >"$TMP/lp.jsonl"
  run_capture lp_off$np $np batch --model "$M" --input "$TMP/lp.jsonl" --output "$TMP/lp_off$np.jsonl" --quiet
  run_capture lp_on$np $np batch --model "$M" --input "$TMP/lp.jsonl" --output "$TMP/lp_on$np.jsonl" --quiet --speculative ngram:4:1
  if python3 - "$TMP/lp_off$np.jsonl" "$TMP/lp_on$np.jsonl" >"$TMP/lp$np.txt" 2>&1 <<'PY'
import json, struct, sys
off, on = ({j["custom_id"]: j for j in map(json.loads, open(p))} for p in sys.argv[1:])
bits = lambda xs: [struct.pack("<f", x) for x in xs]
assert len(on) == 2
for cid, a in off.items():
    b = on[cid]
    assert b["token_ids"] == a["token_ids"], cid
    assert bits(b["logprobs"]) == bits(a["logprobs"]), (cid, b["logprobs"], a["logprobs"])
    assert b["top_logprobs"] == a["top_logprobs"], cid
    assert b["speculative"]["accepted_tokens"] > 0, b["speculative"]
print(sum(len(j["logprobs"]) for j in on.values()))
PY
  then pass "batch np$np: logprobs and top_logprobs bit-equal ($(cat "$TMP/lp$np.txt") tokens)"
  else fail "batch np$np logprobs:"; cat "$TMP/lp$np.txt"; fi
  grep -q "speculative: [1-9][0-9]* of [0-9]* proposed tokens accepted" "$TMP/b_on$np.err" \
    && pass "batch np$np: $(grep -o 'speculative: .*' "$TMP/b_on$np.err")" \
    || fail "batch np$np: no speculative summary"
done

# Prefix caching with rejected proposals in the running sequences: later lines reuse cached
# prompt blocks (and their tokens are equal to the run without speculation, above).
hits() { grep -o 'prefix cache: [0-9]*' "$TMP/$1.err" | grep -o '[0-9]*$'; }
[[ $(hits b_on2) -gt 0 ]] && pass "prefix cache with speculation: $(grep -o 'prefix cache: .*' "$TMP/b_on2.err")" \
  || fail "prefix cache with speculation reused nothing: $(grep -o 'prefix cache: .*' "$TMP/b_on2.err")"

# Two replicas (--tp 1 at -np 2): lines on the remote replica report their speculation over the
# replica wire, the job total sums both replicas, tokens equal the TP 1 run without speculation.
run_capture dp 2 batch --model "$M" --input "$TMP/in.jsonl" --output "$TMP/dp.jsonl" --quiet \
  --max-batch-size 4 --kv-cache-blocks 128 --tp 1 --speculative ngram:4:1
if python3 - "$TMP/off1.jsonl" "$TMP/dp.jsonl" "$TMP/dp.err" >"$TMP/dp.txt" 2>&1 <<'PY'
import json, re, sys
off, dp = ({j["custom_id"]: j for j in map(json.loads, open(p))} for p in sys.argv[1:3])
for cid, a in off.items():
    if cid != "sampled":
        assert dp[cid]["token_ids"] == a["token_ids"], cid
total = sum(j["speculative"].get("accepted_tokens", 0) for j in dp.values())
m = re.search(r"speculative: (\d+) of", open(sys.argv[3]).read())
assert m and int(m.group(1)) == total > 0, (m and m.group(0), total)
print(f"{total} accepted over both replicas")
PY
then pass "batch with two replicas: $(cat "$TMP/dp.txt"), tokens equal"
else fail "batch with two replicas:"; cat "$TMP/dp.txt"; sed 's/^/    /' "$TMP/dp.err"; fi

for bad in ngram:17 ngram:4:3:2; do
  run_capture bad_$bad 1 generate --model "$M" --prompt x --speculative "$bad"
  expect_failure bad_$bad "allowed forms: ngram:K\[:MIN_MATCH\[:MAX_MATCH\]\] or draft:DIR:K"
done
run_capture bad_mb 1 generate --model "$M" --prompt x --speculative-max-batch 4
expect_failure bad_mb "speculative-max-batch needs --speculative"
finish
