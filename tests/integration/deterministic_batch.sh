#!/usr/bin/env bash
# `llama2 batch --deterministic` (issue 41) under mpirun -np 4 on the CPU backend: 4 requests
# (2 greedy, 2 seeded top-p; 16 tokens, logprobs with 5 alternatives) give the same tokens, text
# and logprobs (the JSON numbers compared exactly) run one at a time (--max-batch-size 1) and
# placed among 100 random mates in batches of up to 64 with prompts cut into 48-token chunks, a
# mate computed earlier sharing a request's first 32 tokens (a prefix-cache hit). Open MPI's ring all-reduce is forced,
# which sums each element in an order set by its place in the message: without the flag the
# logprobs then differ (the flag reaches the engine), with it they do not. --deterministic on a
# command without it is a usage error.
# A third argument `cuda` runs the same on the cuda backend (small-d64 in fp16, one rank, one
# GPU; exit 77, a skip, without one): the flag must hold there too; whether the default differs
# is only reported (a small model's batch-1 and batch-64 kernels may happen to agree).
source "$(dirname "$0")/lib.sh" "$@"
M="$MODELS/tiny-gqa"
NP=4
backend=()
if [[ ${3:-} == cuda ]]; then
  command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU' ||
    { echo "no CUDA device: skipped"; exit 77; }
  M="$MODELS/small-d64" NP=1 backend=(--backend cuda --dtype fp16)
fi
export OMPI_MCA_coll_tuned_use_dynamic_rules=1 OMPI_MCA_coll_tuned_allreduce_algorithm=4

python3 - "$TMP" <<'PY'
import json, random, sys
rng = random.Random(41)
tmp = sys.argv[1]
def ids(n):
    return [1] + [rng.randrange(3, 512) for _ in range(n - 1)]
reqs = []
for i in range(4):
    r = {"custom_id": f"req{i}", "prompt_tokens": ids(rng.randrange(36, 60)), "max_new_tokens": 16,
         "ignore_eos": True, "logprobs": True, "top_logprobs": 5}
    r.update({"temperature": 0} if i % 2 == 0 else {"temperature": 0.8, "top_p": 0.9})
    r["seed"] = 7 + i  # else the job seed mixed with the line number, which differs between files
    reqs.append(r)
mates = []
for j in range(100):
    m = {"custom_id": f"mate{j}", "prompt_tokens": ids(rng.randrange(2, 60)),
         "max_new_tokens": rng.randrange(1, 40), "ignore_eos": True, "temperature": 1.0, "seed": j}
    mates.append(m)
mates[0]["prompt_tokens"] = reqs[0]["prompt_tokens"][:32] + ids(9)[1:]  # computed before req0
with open(f"{tmp}/alone.jsonl", "w") as f:
    for r in reqs:
        f.write(json.dumps(r) + "\n")
with open(f"{tmp}/mixed.jsonl", "w") as f:
    # 64 mates fill the first step; each request then waits for a free slot behind 10 more.
    for k, m in enumerate(mates):
        if k >= 64 and k % 10 == 4:
            f.write(json.dumps(reqs[(k - 64) // 10]) + "\n")
        f.write(json.dumps(m) + "\n")
PY

common=(--model "$M" --quiet --deterministic "${backend[@]}")
run_capture alone $NP batch "${common[@]}" --input "$TMP/alone.jsonl" --output "$TMP/alone.out.jsonl" \
  --max-batch-size 1
run_capture mixed $NP batch "${common[@]}" --input "$TMP/mixed.jsonl" --output "$TMP/mixed.out.jsonl" \
  --max-batch-size 64 --prefill-chunk 48
run_capture plain $NP batch --model "$M" --quiet "${backend[@]}" --input "$TMP/mixed.jsonl" \
  --output "$TMP/plain.out.jsonl" --max-batch-size 64 --prefill-chunk 48
for r in alone mixed plain; do
  [[ $(rc_of $r) -eq 0 ]] || { fail "$r: exit $(rc_of $r)"; sed 's/^/    /' "$TMP/$r.err"; }
done
grep -q 'prefix cache: [1-9][0-9]* of' "$TMP/mixed.err" && pass "mixed: $(grep -o 'prefix cache: .*' "$TMP/mixed.err")" \
  || fail "mixed: no prefix-cache hit: $(grep -o 'prefix cache: .*' "$TMP/mixed.err")"

# same A B: exit 0 when the requests' lines of A and B are identical (tokens, text, logprobs).
same() {
  python3 - "$TMP/$1.out.jsonl" "$TMP/$2.out.jsonl" <<'PY'
import json, sys
def reqs(p):
    out = {}
    for line in open(p):
        r = json.loads(line)
        if r["custom_id"].startswith("req"):
            out[r["custom_id"]] = {k: v for k, v in r.items() if k not in ("timings", "line")}
    return out
a, b = reqs(sys.argv[1]), reqs(sys.argv[2])
assert len(a) == 4 and all(len(r["token_ids"]) == 16 and r.get("logprobs") for r in a.values()), a
sys.exit(0 if a == b else 1)
PY
}
same alone mixed && pass "--deterministic: alone and among 100 mates, identical tokens, text, logprobs" \
  || fail "--deterministic: alone and among mates differ"
if [[ ${#backend[@]} -gt 0 ]]; then
  same alone plain && echo "note: without the flag the cuda outputs happened to agree too" \
    || echo "note: without --deterministic the cuda outputs differ"
else
  same alone plain && fail "without the flag the ring all-reduce changed nothing (does the flag do anything?)" \
    || pass "without --deterministic the outputs differ under the ring all-reduce"
fi

echo "some text" >"$TMP/text.txt"
run_capture bad 1 perplexity --model "$M" --text-file "$TMP/text.txt" --deterministic
expect_failure bad "deterministic"
finish
