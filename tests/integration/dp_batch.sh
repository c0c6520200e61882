#!/usr/bin/env bash
# Data parallelism in `batch` and the layout refusals (issue 16):
#  * the same input through 1 replica (-np 1), 2 replicas of TP 1 (-np 2 --tp 1) and 2 replicas
#    of TP 2 (-np 4 --tp 2) gives the same result for every line (greedy and seeded sampling);
#  * resume with 2 replicas: an output holding the first half of the 1-replica results is
#    completed to exactly the same set of lines, each once;
#  * the 2-replica jobs spread the lines: the run's stderr summary names both replicas;
#  * bad layouts are refused once with the valid --tp values: --tp 3 with -np 4, and --tp 4 with
#    -np 4 when LLAMA2_TEST_RANKS_PER_NODE=2 fakes two nodes of two ranks.
source "$(dirname "$0")/lib.sh" "$@"
M="$MODELS/tiny-gqa"

python3 - "$TMP/in.jsonl" <<'PY'
import json, sys
rows = []
for i in range(16):
    row = {"custom_id": f"c{i}", "prompt": f"Line {i} says", "max_new_tokens": 10 + i % 5}
    if i % 2:
        row.update({"temperature": 0.8, "top_k": 20, "seed": 100 + i})
    else:
        row.update({"temperature": 0})
    rows.append(json.dumps(row))
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
PY

# same.py A B: both outputs have the same lines (by custom_id: text, token_ids, finish_reason,
# seed), each custom_id once.
cat >"$TMP/same.py" <<'PY'
import json, sys
def load(p):
    rows = [json.loads(l) for l in open(p) if l.strip()]
    ids = [r["custom_id"] for r in rows]
    assert len(ids) == len(set(ids)), f"{p}: a custom_id twice"
    return {r["custom_id"]: (r["text"], r["token_ids"], r["finish_reason"], r["seed"]) for r in rows}
a, b = load(sys.argv[1]), load(sys.argv[2])
diff = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
if diff:
    sys.exit(f"{len(diff)} lines differ: {diff[:5]}")
print(f"{len(a)} lines identical")
PY

same() {
  local name=$1 out
  if out=$(python3 "$TMP/same.py" "$TMP/one.jsonl" "$TMP/$name.jsonl" 2>&1); then
    pass "$name: $out ($(cat "$TMP/$name.secs")s)"
  else
    fail "$name: $out"; sed 's/^/    /' "$TMP/$name.err" | tail -20
  fi
}

common=(batch --model "$M" --backend cpu --input "$TMP/in.jsonl" --cpu-threads 1 --max-batch-size 4 --seed 7)
run_capture one 1 "${common[@]}" --output "$TMP/one.jsonl"
[[ $(rc_of one) -eq 0 ]] || { fail "1 replica: exit $(rc_of one)"; cat "$TMP/one.err"; }
run_capture np2tp1 2 "${common[@]}" --output "$TMP/np2tp1.jsonl" --tp 1
same np2tp1
if grep -Eq "lines per replica: 0: [1-9][0-9]*, 1: [1-9]" "$TMP/np2tp1.err"; then
  pass "np2tp1: $(grep "lines per replica" "$TMP/np2tp1.err")"
else
  fail "np2tp1: not every replica took lines"; tail -5 "$TMP/np2tp1.err"
fi
run_capture np4tp2 4 "${common[@]}" --output "$TMP/np4tp2.jsonl" --tp 2
same np4tp2

# Resume with 2 replicas from the first half of the 1-replica output.
head -n 8 "$TMP/one.jsonl" >"$TMP/resumed.jsonl"
run_capture resumed 2 "${common[@]}" --output "$TMP/resumed.jsonl" --tp 1 --resume
same resumed

run_capture tp3 4 "${common[@]}" --output "$TMP/tp3.jsonl" --tp 3
expect_failure tp3 "--tp 3 does not divide the 4 ranks of this job; valid --tp values: 1, 2, 4"
LLAMA2_TEST_RANKS_PER_NODE=2 run_capture span 4 "${common[@]}" --output "$TMP/span.jsonl" --tp 4
expect_failure span "a tensor-parallel group must stay on one node: valid --tp values: 1, 2"

# plan --dp: per-GPU numbers unchanged, sequences and KV tokens multiplied by the replicas.
if "$LLAMA2" plan --preset 7b --tp 2 --gpu-mem 80GiB --json >"$TMP/plan1.json" &&
   "$LLAMA2" plan --preset 7b --tp 2 --dp 3 --gpu-mem 80GiB --json >"$TMP/plan3.json" &&
   python3 - "$TMP/plan1.json" "$TMP/plan3.json" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert b["dp"] == 3 and b["gpus"] == 6, b
assert b["kv_blocks"] == a["kv_blocks"] and b["weight_bytes_per_gpu"] == a["weight_bytes_per_gpu"]
assert b["job_max_sequences"] == 3 * a["max_sequences"] > 0, (a["max_sequences"], b)
assert b["job_kv_tokens"] == 3 * a["kv_tokens"]
PY
then pass "plan --dp 3: per-GPU numbers kept, job sequences x3"
else fail "plan --dp"
fi
"$LLAMA2" plan --preset 7b --dp 0 >"$TMP/plan0.out" 2>&1
if [[ $? -ne 0 ]] && grep -q -- "--dp must be >= 1 (got 0)" "$TMP/plan0.out"; then pass "plan --dp 0 refused"
else fail "plan --dp 0: $(cat "$TMP/plan0.out")"
fi
finish
