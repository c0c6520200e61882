#!/usr/bin/env bash
# llama2 batch under mpirun: mixed valid/invalid lines, batch invariance (greedy output in a batch
# equals the same prompt alone through `generate`), resume after a partial line and after SIGKILL.
source "$(dirname "$0")/lib.sh" "$@"
M="$MODELS/tiny-gqa"

cat >"$TMP/mixed.jsonl" <<'JSONL'
{"custom_id": "ok-text", "prompt": "Hello there, señor", "max_new_tokens": 6, "temperature": 0}
not json at all
{"custom_id": "ok-ids", "prompt_tokens": [1, 5, 9], "max_new_tokens": 4, "seed": 5, "top_k": 3}
{"custom_id": "ok-text", "prompt": "duplicate id"}
{"custom_id": "typo", "prompt": "x", "max_tokens": 4}
{"custom_id": "too-long", "prompt": "x", "max_new_tokens": 100000}
{"custom_id": "bad-temp", "prompt": "x", "temperature": -1}
{"prompt": "no id"}
{"custom_id": "both", "prompt": "x", "prompt_tokens": [1]}
{"custom_id": "bad-id", "prompt_tokens": [1, 999999]}
JSONL
for np in 1 2; do
  run_capture mixed$np $np batch --model "$M" --input "$TMP/mixed.jsonl" --output "$TMP/mixed$np.out.jsonl" --quiet
  [[ $(rc_of mixed$np) -eq 3 ]] && pass "np=$np mixed input exits 3 (some lines failed)" || fail "np=$np mixed exit $(rc_of mixed$np)"
  python3 - "$TMP/mixed$np.out.jsonl" <<'PY' && pass "np=$np one output line per input line, right codes" || fail "np=$np mixed output"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
assert len(rows) == 10, len(rows)
err = {(r.get("custom_id"), r.get("line")): r["error"]["code"] for r in rows if "error" in r}
ok = {r["custom_id"]: r for r in rows if "error" not in r}
want = {(None, 2): "invalid_json", ("ok-text", 4): "duplicate_custom_id", ("typo", 5): "invalid_request",
        ("too-long", 6): "prompt_too_long", ("bad-temp", 7): "invalid_request", (None, 8): "invalid_request",
        ("both", 9): "invalid_request", ("bad-id", 10): "invalid_request"}
assert err == want, err
assert set(ok) == {"ok-text", "ok-ids"}, ok.keys()
assert ok["ok-text"]["usage"]["completion_tokens"] == len(ok["ok-text"]["token_ids"]) <= 6
assert ok["ok-ids"]["usage"] == {"prompt_tokens": 3, "completion_tokens": 4}
PY
done

# Tool calls on batch lines (docs/tool-calling.md): the result line carries `tool_calls`; a
# tool_choice naming no given tool is the line's invalid_request. docs-8m's 4,096 pieces keep the
# rendered tool list short.
cat >"$TMP/tools.jsonl" <<'JSONL'
{"custom_id": "call", "messages": [{"role": "user", "content": "Pick one."}], "tool_choice": "required", "parallel_tool_calls": false, "max_new_tokens": 60, "temperature": 0, "tools": [{"type": "function", "function": {"name": "pick", "parameters": {"type": "object", "properties": {"x": {"enum": ["a", "b"]}}, "required": ["x"]}}}]}
{"custom_id": "named-missing", "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "function", "function": {"name": "nope"}}, "tools": [{"type": "function", "function": {"name": "pick"}}]}
JSONL
run_capture tools 2 batch --model "$(dirname "$0")/../../models/docs-8m" --input "$TMP/tools.jsonl" --output "$TMP/tools.out.jsonl" --quiet
python3 - "$TMP/tools.out.jsonl" <<'PY' && pass "np=2 batch: a tool call line has tool_calls, a bad tool_choice line invalid_request" || fail "batch tools: exit $(rc_of tools) $(cat "$TMP/tools.out.jsonl" "$TMP/tools.err")"
import json, sys
rows = {r["custom_id"]: r for r in map(json.loads, open(sys.argv[1], encoding="utf-8"))}
call = rows["call"]["tool_calls"]
assert len(call) == 1 and call[0]["type"] == "function" and call[0]["id"].startswith("call_"), call
assert call[0]["function"]["name"] == "pick" and json.loads(call[0]["function"]["arguments"]) in ({"x": "a"}, {"x": "b"}), call
assert rows["call"]["text"].startswith("[TOOL_CALLS]") and rows["call"]["finish_reason"] == "stop", rows["call"]
err = rows["named-missing"]["error"]
assert err["code"] == "invalid_request" and "not among" in err["message"], err
PY

# Batch invariance: 12 greedy prompts of different lengths in batches of 8 vs each alone.
python3 - "$TMP/greedy.jsonl" <<'PY'
import json, sys
prompts = ["Hi", "The cat sat on the mat and looked around the room", "北京 café 🍂", "1 2 3 4 5",
           "Once upon a time", "Weather: ☀️", "ab", "A much longer prompt " * 6, "Ola", "xyz", "Zürich", "end"]
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for i, p in enumerate(prompts):
        f.write(json.dumps({"custom_id": f"g{i}", "prompt": p, "max_new_tokens": 10 + i, "temperature": 0,
                            "ignore_eos": True}, ensure_ascii=False) + "\n")
PY
for np in 1 2; do
  run_capture greedy$np $np batch --model "$M" --input "$TMP/greedy.jsonl" --output "$TMP/greedy$np.out.jsonl" --max-batch-size 8 --prefill-chunk 16 --quiet
  [[ $(rc_of greedy$np) -eq 0 ]] || fail "np=$np greedy batch exit $(rc_of greedy$np)"
  mism=0
  while IFS=$'\t' read -r id prompt n; do
    run_capture alone 1 generate --model "$M" --quiet --json --prompt "$prompt" -n "$n" --temperature 0 --ignore-eos
    python3 - "$TMP/alone.out" "$TMP/greedy$np.out.jsonl" "$id" <<'PY' || mism=$((mism + 1))
import json, sys
alone = json.load(open(sys.argv[1]))
batch = {r["custom_id"]: r for r in map(json.loads, open(sys.argv[2], encoding="utf-8"))}[sys.argv[3]]
sys.exit(0 if alone["token_ids"] == batch["token_ids"] and alone["text"] == batch["text"] else 1)
PY
  done < <(python3 -c 'import json,sys
for l in open(sys.argv[1], encoding="utf-8"):
    r = json.loads(l); print(r["custom_id"], r["prompt"], r["max_new_tokens"], sep="\t")' "$TMP/greedy.jsonl")
  [[ $mism -eq 0 ]] && pass "np=$np batched greedy == generate alone for 12 prompts" || fail "np=$np $mism prompts differ from generate alone"
  # The same batch with each rank's steps split by sequence over 2 threads (meeting at the MPI
  # all-reduces when np=2), and with every operator split instead: the same tokens.
  for split in rows columns; do
    LLAMA2_CPU_SPLIT=$split run_capture split$np$split $np batch --model "$M" --input "$TMP/greedy.jsonl" \
      --output "$TMP/split$np$split.out.jsonl" --max-batch-size 8 --prefill-chunk 16 --cpu-threads 2 --backend cpu --quiet
    python3 - "$TMP/greedy$np.out.jsonl" "$TMP/split$np$split.out.jsonl" <<'PY' &&
import json, sys
a, b = ({r["custom_id"]: r["token_ids"] for r in map(json.loads, open(f, encoding="utf-8"))} for f in sys.argv[1:])
sys.exit(0 if a == b and len(a) == 12 else 1)
PY
      pass "np=$np LLAMA2_CPU_SPLIT=$split, 2 threads per rank: same tokens" ||
      fail "np=$np LLAMA2_CPU_SPLIT=$split: tokens differ (exit $(rc_of split$np$split))"
  done
done

# Resume after a partial last line: cut the finished output after 5 lines plus half a line.
python3 - "$TMP/greedy1.out.jsonl" "$TMP/resume.jsonl" <<'PY'
import sys
lines = open(sys.argv[1], "rb").read().split(b"\n")
open(sys.argv[2], "wb").write(b"\n".join(lines[:5]) + b"\n" + lines[5][: len(lines[5]) // 2])
PY
run_capture resume 2 batch --model "$M" --input "$TMP/greedy.jsonl" --output "$TMP/resume.jsonl" --max-batch-size 8 --quiet --resume
python3 - "$TMP/resume.jsonl" "$TMP/greedy1.out.jsonl" <<'PY' && pass "resume after a partial line: every id once, same results" || fail "resume after partial line"
import json, sys
got = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
ref = {r["custom_id"]: r for r in map(json.loads, open(sys.argv[2], encoding="utf-8"))}
ids = [r["custom_id"] for r in got]
assert sorted(ids) == sorted(ref), ids
assert all(r["token_ids"] == ref[r["custom_id"]]["token_ids"] for r in got)
PY
run_capture overwrite 1 batch --model "$M" --input "$TMP/greedy.jsonl" --output "$TMP/resume.jsonl" --quiet
expect_failure overwrite "already has results; pass --resume"

# A real SIGKILL mid-job (as a scheduler would), then --resume completes the job.
python3 -c 'import json
for i in range(100): print(json.dumps({"custom_id": f"k{i}", "prompt": f"Story {i}:", "max_new_tokens": 200, "ignore_eos": True, "seed": i}))' >"$TMP/kill.jsonl"
set -m  # the background job gets its own process group: one kill reaches mpirun and every rank
"$MPIRUN" 2 "$LLAMA2" batch --model "$M" --input "$TMP/kill.jsonl" --output "$TMP/kill.out.jsonl" --max-batch-size 1 --quiet >/dev/null 2>&1 &
pid=$!
set +m
for _ in $(seq 400); do [[ -s "$TMP/kill.out.jsonl" ]] && break; sleep 0.02; done
# A scheduler kills every process of the job at once. Open MPI starts the ranks in process groups
# of their own, so the group kill reaches timeout and mpirun only; orphaned ranks would go on and
# finish the job (they did, unnoticed, until the check below existed).
pkill -KILL -f "kill.out.jsonl" 2>/dev/null
kill -KILL -- -"$pid" 2>/dev/null; wait "$pid" 2>/dev/null
for _ in $(seq 50); do pgrep -f "kill.out.jsonl" >/dev/null || break; sleep 0.1; done
before=$(wc -l <"$TMP/kill.out.jsonl")
# The kill must land mid-job for the resume below to mean anything (100 x 200 tokens at batch 1;
# the poll above kills after the first result, ~1% into the job). tests/integration/
# batch_resume.sh kills twice and resumes several times over an input with invalid lines.
if (( before >= 100 )); then fail "the job finished before SIGKILL ($before lines): make it longer"; fi
run_capture killresume 2 batch --model "$M" --input "$TMP/kill.jsonl" --output "$TMP/kill.out.jsonl" --max-batch-size 8 --quiet --resume
python3 - "$TMP/kill.out.jsonl" <<'PY' && pass "SIGKILL after $before lines, --resume: 100 ids exactly once, no partial line" || fail "resume after SIGKILL"
import json, sys
raw = open(sys.argv[1], "rb").read()
assert raw.endswith(b"\n")
ids = [json.loads(l)["custom_id"] for l in raw.decode().splitlines()]
assert sorted(ids) == sorted(f"k{i}" for i in range(100)), (len(ids), len(set(ids)))
PY

# LLAMA2_STEP_LOG: one line per step; its logit rows add up to the tokens generated, and the
# summary script reads it (decode, mixed and prefill steps all occur with a 4-token prefill chunk).
python3 -c 'import json
for i in range(5): print(json.dumps({"custom_id": f"s{i}", "prompt": f"Step log {i} with a longer prompt", "max_new_tokens": 7, "ignore_eos": True}))' >"$TMP/steps.jsonl"
LLAMA2_STEP_LOG="$TMP/steps.log" run_capture steplog 2 batch --model "$M" --input "$TMP/steps.jsonl" \
  --output "$TMP/steps.out.jsonl" --max-batch-size 3 --prefill-chunk 4 --quiet
python3 - "$TMP/steps.log" <<'PY' && python3 "$(dirname "$0")/../../benchmarks/serve/step_log_summary.py" "$TMP/steps.log" >"$TMP/steps.summary" && grep -q "| mixed |" "$TMP/steps.summary" && pass "step log: 35 logit rows over $(grep -vc '^#' "$TMP/steps.log") steps, summary by kind" || fail "step log"
import sys
rows = [l.split() for l in open(sys.argv[1]) if not l.startswith("#")]
# columns: decode_rows prefill_seqs prefill_tokens logit_rows ms host_ms (host_ms is 0 on the first step)
assert all(len(r) == 6 and float(r[4]) > 0 and float(r[5]) >= 0 for r in rows), rows[:3]
assert sum(int(r[3]) for r in rows) == 35, sum(int(r[3]) for r in rows)
PY

# Progress goes to stderr as plain lines when stderr is a file: no carriage returns.
# vLLM's sampling extensions (issue 35) in batch lines at np=2: the biases and min_tokens' masks
# reach both ranks' vocabulary slices through the step plan.
echo '{"custom_id": "g", "prompt_tokens": [1, 5, 9], "max_new_tokens": 6, "temperature": 0, "ignore_eos": true}' >"$TMP/x0.jsonl"
run_capture x0 2 batch --model "$M" --input "$TMP/x0.jsonl" --output "$TMP/x0.out.jsonl" --quiet
python3 - "$TMP/x0.out.jsonl" "$TMP/x1.jsonl" <<'PY'
import json, sys
g = json.loads(open(sys.argv[1]).readline())["token_ids"]
forced = next(i for i in range(300, 512) if i not in g)
base = {"prompt_tokens": [1, 5, 9], "max_new_tokens": 6, "temperature": 0, "ignore_eos": True}
lines = [{"custom_id": "bias", "logit_bias": {str(forced): 100}, "meta": [forced, g]},
         {"custom_id": "ban", "logit_bias": {str(g[0]): -100}},
         {"custom_id": "stop", "stop_token_ids": [g[0]]},
         {"custom_id": "min", "stop_token_ids": [g[0]], "min_tokens": 3},
         {"custom_id": "bad", "logit_bias": {"5": 101}}]
with open(sys.argv[2], "w") as f:
    for l in lines:
        meta = l.pop("meta", None)
        f.write(json.dumps({**base, **l}) + "\n")
json.dump([forced, g], open(sys.argv[2] + ".meta", "w"))
PY
run_capture x1 2 batch --model "$M" --input "$TMP/x1.jsonl" --output "$TMP/x1.out.jsonl" --quiet
python3 - "$TMP/x1.out.jsonl" "$TMP/x1.jsonl.meta" <<'PY' && pass "np=2 batch: logit_bias, stop_token_ids, min_tokens, a bad bias refused" || fail "np=2 batch sampling extensions"
import json, sys
forced, g = json.load(open(sys.argv[2]))
rows = {r["custom_id"]: r for r in map(json.loads, open(sys.argv[1]))}
assert rows["bias"]["token_ids"] == [forced] * 6, rows["bias"]
assert rows["ban"]["token_ids"][0] != g[0], rows["ban"]
assert rows["stop"]["token_ids"] == [g[0]] and rows["stop"]["finish_reason"] == "stop", rows["stop"]
assert len(rows["min"]["token_ids"]) >= 3 and g[0] not in rows["min"]["token_ids"][:3], rows["min"]
assert rows["bad"]["error"]["code"] == "invalid_request" and "logit_bias" in rows["bad"]["error"]["message"], rows["bad"]
PY
run_capture progress 2 batch --model "$M" --input "$TMP/greedy.jsonl" --output "$TMP/progress.jsonl" --quiet --progress-interval 0.01
if grep -q $'\r' "$TMP/progress.err"; then fail "carriage return in non-tty progress"
elif grep -q "12/12 prompts done" "$TMP/progress.err"; then pass "plain progress lines: $(grep -c 'prompts done' "$TMP/progress.err")"
else fail "no final progress line"; fi
finish
