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
# shellcheck source=tests/http/server_lib.sh
source "$HERE/server_lib.sh"
test_python http.tools_client openai pytest jsonschema sentencepiece langchain_openai
ROOT=$(cd "$HERE/../.." && pwd)
"$LLAMA2" make-test-model --out "$TMP/model" --hidden-size 128 --intermediate-size 344 \
  --layers 2 --heads 4 --kv-heads 2 --vocab 4096 --max-position-embeddings 2048 \
  --tokenizer "$ROOT/models/docs-8m/tokenizer.model" >"$TMP/make.log" 2>&1 || { fail "make-test-model"; cat "$TMP/make.log"; }
export MODEL=tools-model TOKENIZER=$ROOT/models/docs-8m/tokenizer.model
http_serve serve -- --model "$TMP/model" --served-model-name "$MODEL" --max-batch-size 4 \
  --cpu-threads 1 --quiet
http_up serve
export BASE=http://127.0.0.1:$PORT
http_pytest "tool calls, python clients" 200 "$HERE/test_tools_client.py"
# Rank 0 drains on SIGTERM and the job exits 0.
http_stop serve
finish
