#!/usr/bin/env bash
# `batch --resume` is idempotent (issue 14, item 9): an input with invalid JSON, lines without a
# custom_id, a non-string custom_id and a duplicate custom_id, run as a job that is SIGKILLed
# mid-run twice and then resumed until done and twice more: after every run each non-blank input
# line has at most one output line, and at the end exactly one.
source "$(dirname "$0")/lib.sh" "$@"
M="$MODELS/tiny-gqa"

# 30 long valid lines (batch size 1 keeps the job running long enough to be killed mid-way), with
# the bad lines spread among them. "k29" comes back as a duplicate at the end: its first
# occurrence finishes last, after the duplicate's error line, which is written at once.
python3 - "$TMP/in.jsonl" <<'PY'
import json, sys
out = []
for i in range(30):
    out.append(json.dumps({"custom_id": f"k{i}", "prompt": f"Story {i}:", "max_new_tokens": 160,
                           "ignore_eos": True, "seed": i}))
    if i % 8 == 3:
        out += ["this is not json", '{"prompt": "no custom_id"}', "",
                '{"custom_id": 7, "prompt": "custom_id is not a string"}']
out.append(json.dumps({"custom_id": "k29", "prompt": "duplicate"}))
out.append('{"custom_id": "k0", "prompt": ')  # cut short: invalid JSON again
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY

# check.py OUT FINAL: maps every output line to its input line (by "line" when present, else by
# custom_id) and fails when one has two output lines, or (FINAL=1) when one has none.
cat >"$TMP/check.py" <<'PY'
import json, sys, collections
inp = [l for l in open(sys.argv[1], encoding="utf-8").read().split("\n")]
nonblank = [n + 1 for n, l in enumerate(inp) if l.strip()]
first = {}
for n in nonblank:
    try:
        j = json.loads(inp[n - 1])
    except ValueError:
        continue
    if isinstance(j, dict) and isinstance(j.get("custom_id"), str):
        first.setdefault(j["custom_id"], n)
raw = open(sys.argv[2], "rb").read()
assert raw == b"" or raw.endswith(b"\n"), "partial last line"
count = collections.Counter()
for row in map(json.loads, raw.decode().splitlines()):
    count[row["line"] if "line" in row else first[row["custom_id"]]] += 1
twice = sorted(n for n, c in count.items() if c > 1)
missing = sorted(set(nonblank) - set(count))
if twice:
    sys.exit(f"input lines with more than one output line: {twice}")
if sys.argv[3] == "1" and missing:
    sys.exit(f"input lines without an output line: {missing}")
print(f"{sum(count.values())} output lines for {len(nonblank)} input lines")
PY
check() { python3 "$TMP/check.py" "$TMP/in.jsonl" "$TMP/out.jsonl" "$1" 2>&1; }

# descendants PID: every process below PID (mpirun's ranks run in process groups of their own,
# so a group kill would miss them; a scheduler's SIGKILL reaches all of them).
descendants() {
  local child
  for child in $(ps -o pid= --ppid "$1"); do
    echo "$child"
    descendants "$child"
  done
}

# kill_mid_run MIN_LINES: starts a resumed job, SIGKILLs it and all its ranks once the output has
# more than MIN_LINES lines, and waits (bounded) until every one of those processes is gone.
kill_mid_run() {
  local min=$1 pid pids n=0
  "$MPIRUN" 2 "$LLAMA2" batch --model "$M" --input "$TMP/in.jsonl" --output "$TMP/out.jsonl" \
    --max-batch-size 1 --quiet --resume >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 1500); do
    n=$(wc -l 2>/dev/null <"$TMP/out.jsonl" || echo 0)
    ((n > min)) && break
    sleep 0.02
  done
  pids="$pid $(descendants "$pid")"
  kill -KILL $pids 2>/dev/null
  wait "$pid" 2>/dev/null
  for _ in $(seq 100); do
    kill -0 $pids 2>/dev/null || break
    sleep 0.05
  done
  kill -0 $pids 2>/dev/null && fail "processes of the killed job still running: $pids"
  wc -l <"$TMP/out.jsonl"
}

# Run 1 (--resume on a missing file starts the job): killed after the 14 error lines (written at
# once) and at least one result.
after1=$(kill_mid_run 14)
out=$(check 0) && pass "SIGKILL after $after1 lines: no input line twice ($out)" || fail "after kill 1: $out"
# Run 2: resumed, killed again after a few more results.
after2=$(kill_mid_run $((after1 + 2)))
out=$(check 0) && pass "resume 1, SIGKILL after $after2 lines: no input line twice ($out)" || fail "after kill 2: $out"
((after2 < 44)) || fail "the job finished before SIGKILL ($after2 lines): make it longer"
# Runs 3-5: resumed to the end, then twice more on the finished output (nothing left to do).
for r in 2 3 4; do
  run_capture resume$r 2 batch --model "$M" --input "$TMP/in.jsonl" --output "$TMP/out.jsonl" \
    --max-batch-size 8 --quiet --resume
  rc=$(rc_of resume$r)
  # 3: some lines of the job are invalid, also when their error lines came from an earlier run.
  [[ $rc -eq 3 ]] || fail "resume $r exited $rc: $(head -5 "$TMP/resume$r.err")"
  out=$(check 1) && pass "resume $r (exit $rc): every input line exactly once ($out)" || fail "resume $r: $out"
done
finish
