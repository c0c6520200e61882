#!/usr/bin/env bash
# Tool calling over `llama2 serve --http` end to end (docs/tool-calling.md): a real 2-rank server
# on the CPU backend; the official OpenAI Python client and langchain-openai run
# test_tools_client.py under pytest (tool round trips with required, named and auto choices,
# streamed deltas against the whole answer, parallel calls, refusals; bind_tools and
# with_structured_output(method="function_calling")), every call's arguments validated against
# its tool's schema by Python's jsonschema. Then SIGTERM to rank 0: the job must exit 0.
# The model is random (made here) with models/docs-8m's 4,096-piece tokenizer and a 2,048-token
# context, so the tools' JSON in the system text fits; its answers are valid calls by construction.
#   usage: tools_client.sh LLAMA2 MODELS
# The client runs on the repository's .venv/bin/python (launch/requirements-test.txt), or on
# $LLAMA2_PYTHON; without it the test is skipped (exit 77), and fails when CI=true.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/test_python.sh
source "$HERE/../test_python.sh"
test_python http.tools_client openai pytest jsonschema sentencepiece langchain_openai
PYTHON=$PY
ROOT=$(cd "$HERE/../.." && pwd)
"$LLAMA2" make-test-model --out "$TMP/model" --hidden-size 128 --intermediate-size 344 \
  --layers 2 --heads 4 --kv-heads 2 --vocab 4096 --max-position-embeddings 2048 \
  --tokenizer "$ROOT/models/docs-8m/tokenizer.model" >"$TMP/make.log" 2>&1 || { fail "make-test-model"; cat "$TMP/make.log"; }
export MODEL=tools-model TOKENIZER=$ROOT/models/docs-8m/tokenizer.model
"$MPIRUN" 2 "$LLAMA2" serve --model "$TMP/model" --socket "$TMP/s.sock" --served-model-name "$MODEL" \
  --http 127.0.0.1:0 --max-batch-size 4 --cpu-threads 1 --quiet >"$TMP/serve.log" 2>&1 &
job=$!
for _ in $(seq 600); do grep -q "HTTP on" "$TMP/serve.log" && break; sleep 0.1; done
PORT=$(sed -n 's/.*HTTP on 127.0.0.1:\([0-9]*\).*/\1/p' "$TMP/serve.log")
[[ -n $PORT ]] || { fail "the server did not report its HTTP port"; cat "$TMP/serve.log"; finish; exit; }
export BASE=http://127.0.0.1:$PORT
pass "HTTP front on port $PORT"
if timeout 200 env PYTHONDONTWRITEBYTECODE=1 "$PYTHON" -m pytest -v -p no:cacheprovider \
  "$HERE/test_tools_client.py" >"$TMP/pytest.out" 2>&1; then
  pass "tool calls, python clients: $(tail -n1 "$TMP/pytest.out" | sed 's/^=* *//; s/ *=*$//')"
else
  fail "tool calls, python clients:"; cat "$TMP/pytest.out"
fi
grep -E '::test_[a-z0-9_]+ (PASSED|FAILED|ERROR|SKIPPED)' "$TMP/pytest.out" | sed 's/ *\[ *[0-9]*%\]$//; s/^.*:://; s/^/    /'
# Rank 0 drains on SIGTERM (a signal to mpirun would cut the ranks) and the job exits 0.
for p in $(pgrep -f -- "--socket $TMP/s.sock"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 && kill -TERM "$p"
done
for _ in $(seq 300); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$job" 2>/dev/null; then
  fail "the server did not exit after the drain"; kill -INT "$job"; wait "$job"
else
  wait "$job"; rc=$?
  [[ $rc -eq 0 ]] && pass "server drained and exited 0" || { fail "server exit $rc"; tail -20 "$TMP/serve.log"; }
fi
finish
