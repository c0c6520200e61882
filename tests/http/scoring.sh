#!/usr/bin/env bash
# Scoring for evaluations against `llama2 serve --http` (issue 35, point 3): a real 2-rank server
# on models/docs-8m, then
#   1. lm-evaluation-harness (lm-eval, pinned in launch/requirements-test.txt) runs its
#      local-completions model on the local loglikelihood task tests/eval/docs_ll/ (token-id
#      prompts, echo, logprobs 1, the server's tokenizer through /tokenizer_info, /tokenize and
#      /detokenize; no hub access: HF_DATASETS_OFFLINE=1, HF_HUB_OFFLINE=1);
#   2. the official openai client (test_openai_scoring.py): echo, max_tokens 0, token-id prompts,
#      prompt_logprobs and its 400s, /tokenizer_info; and (test_openai_choices.py, point 2) `n`
#      and batched prompts, streamed and not, seeded, the prompt prefilled once, admission.
# Every document's log-likelihood must match `llama2 perplexity` on the same text (one BOS first,
# one window), an independent path (kScore steps), within 1e-5 relative.
#   usage: scoring.sh LLAMA2 MODELS_DIR (the repository's models/, where docs-8m is)
# Without lm_eval, openai or pytest in .venv/ the test is skipped (77), or fails when CI=true.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/test_python.sh
source "$HERE/../test_python.sh"
# shellcheck source=tests/http/server_lib.sh
source "$HERE/server_lib.sh"
test_python http.scoring openai pytest lm_eval
MODEL_DIR=$MODELS/docs-8m
TASK_DIR=$HERE/../eval/docs_ll

# References first: `llama2 perplexity` on each text, the sum of its tokens' log-probabilities.
refs=$TMP/refs.jsonl
: >"$refs"
"$PY" -c 'import json,sys; [print(json.loads(l)["text"]) for l in open(sys.argv[1])]' \
  "$TASK_DIR/documents.jsonl" >"$TMP/texts.txt"
echo "Once upon a time, the engine read a prompt and scored every token of it." >>"$TMP/texts.txt"
i=0
while IFS= read -r text; do
  printf '%s' "$text" >"$TMP/doc$i.txt"
  run_capture ppl$i 2 perplexity --model "$MODEL_DIR" --text-file "$TMP/doc$i.txt" --json --cpu-threads 1 </dev/null
  [[ $(rc_of ppl$i) == 0 ]] || { fail "perplexity on text $i: $(cat "$TMP/ppl$i.err")"; finish; exit; }
  "$PY" -c 'import json,sys; j=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print(json.dumps({"text": sys.argv[2], "loglikelihood": -j["mean_nll"] * j["evaluated_tokens"], "tokens": j["tokens"]}))' \
    "$TMP/ppl$i.out" "$text" >>"$refs"
  i=$((i + 1))
done <"$TMP/texts.txt"
pass "llama2 perplexity: $i reference texts"

http_serve serve -- --model "$MODEL_DIR" --max-batch-size 4 --max-queue 8 --cpu-threads 1 --quiet
http_up serve
export BASE=http://127.0.0.1:$PORT REFS=$refs MODEL=docs-8m

# 1. lm-eval, from the task's directory (the task's data_files path is relative to it).
t0=$SECONDS
if (cd "$TASK_DIR" && HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 HF_HOME=$TMP/hf timeout 180 "$PY" -m lm_eval \
  --model local-completions \
  --model_args "model=docs-8m,base_url=$BASE/v1/completions,tokenizer_backend=remote,tokenized_requests=True,custom_prefix_token_id=1,max_length=512,num_concurrent=1,max_retries=1" \
  --tasks llama2_docs_ll --include_path . --batch_size 1 --log_samples --output_path "$TMP/lmeval") \
  >"$TMP/lmeval.log" 2>&1; then
  pass "lm_eval local-completions ran in $((SECONDS - t0)) s"
else
  fail "lm_eval:"; tail -30 "$TMP/lmeval.log"
fi
if "$PY" - "$refs" "$TMP"/lmeval/docs-8m/samples_llama2_docs_ll_*.jsonl >"$TMP/cmp.out" 2>&1 <<'PY'
import json, sys
refs = {j["text"]: j["loglikelihood"] for j in map(json.loads, open(sys.argv[1]))}
n = 0
for line in open(sys.argv[2]):
    s = json.loads(line)
    text, got = s["doc"]["text"], float(s["resps"][0][0])
    want = refs[text]
    rel = abs(got - want) / abs(want)
    print(f"doc {s['doc_id']}: lm-eval {got:.9f} perplexity {want:.9f} rel {rel:.2e}")
    assert rel < 1e-5, (text, got, want)
    n += 1
assert n == 4, n
PY
then
  pass "lm-eval per-document log-likelihoods match llama2 perplexity within 1e-5: $(tr '\n' ';' <"$TMP/cmp.out")"
else
  fail "lm-eval vs perplexity:"; cat "$TMP/cmp.out"
fi

# 2. The openai client.
http_pytest "openai python client" 120 "$HERE/test_openai_scoring.py" "$HERE/test_openai_choices.py"

# Rank 0 drains on SIGTERM; the job exits 0.
http_stop serve
finish
