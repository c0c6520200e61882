#!/usr/bin/env bash
# Speculative decoding through `llama2 serve` (issue 39; docs/speculative.md) on models/docs-8m,
# CPU: a server with --speculative ngram:4:1 at TP 1, 2 and 4, and one without it.
#   - socket: four greedy requests in flight together (several sequences verify in one step), each
#     equal token for token to the same request with "speculative": false; its `done` says
#     "status": "on" with accepted tokens > 0, the opt-out's says "opted_out"; `health` and
#     `stats` count the proposals and acceptances;
#   - HTTP (TP 2): the official openai client, a completion and a chat, equal with and without the
#     extension field "speculative": false, the choice's "speculative" object; /metrics;
#   - the server without --speculative serves "speculative": true without it and says
#     "unavailable", with the same tokens.
#   usage: speculative_serve.sh LLAMA2 MODELS_DIR
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/test_python.sh
source "$HERE/../test_python.sh"
test_python http.speculative openai
M=$MODELS/docs-8m

# start NAME NP ARGS...: a server on $TMP/NAME.sock; waits for its socket (and HTTP port).
start() {
  local name=$1 np=$2
  shift 2
  "$MPIRUN" "$np" "$LLAMA2" serve --model "$M" --socket "$TMP/$name.sock" --max-batch-size 4 \
    --max-inflight-per-connection 8 --cpu-threads 1 --quiet "$@" >"$TMP/$name.log" 2>&1 &
  for _ in $(seq 300); do [[ -S $TMP/$name.sock ]] && break; sleep 0.1; done
  [[ -S $TMP/$name.sock ]] || { fail "$name did not start"; cat "$TMP/$name.log"; finish; exit; }
}
# stop NAME: SIGTERM to rank 0 (it drains and the job exits).
stop() {
  for p in $(pgrep -f -- "--socket $TMP/$1.sock"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 && kill -TERM "$p"
  done
}

start plain 1
for np in 1 2 4; do
  http=()
  [[ $np -eq 2 ]] && http=(--http 127.0.0.1:0)
  start spec$np $np --speculative ngram:4:1 "${http[@]}"
  if [[ $np -eq 2 ]]; then
    for _ in $(seq 100); do grep -q "HTTP on" "$TMP/spec2.log" && break; sleep 0.1; done
    PORT=$(sed -n 's/.*HTTP on 127.0.0.1:\([0-9]*\).*/\1/p' "$TMP/spec2.log")
  fi
  if "$PY" "$HERE/speculative_client.py" "$TMP/spec$np.sock" "$TMP/plain.sock" "${PORT:-}" \
    >"$TMP/py$np.out" 2>&1; then
    pass "serve np$np: $(tr '\n' ';' <"$TMP/py$np.out")"
  else
    fail "serve np$np:"; cat "$TMP/py$np.out"
  fi
  stop spec$np
  PORT=
done
stop plain
wait
finish
