#!/usr/bin/env bash
# The HTTP load generator's short run (benchmarks/http/http_load.py, the CI version of the
# 20-users-per-second scenario): a real 2-rank server on tiny-gqa, 20 new streamed chat
# completions per second for 3 s (~128-token prompts, 16 new tokens); every request must complete
# and the p99 end-to-end latency stay under a generous 10 s. Then 512 streaming clients connected
# at once (the concurrency the front is sized for; 64 run, the rest wait in the queue): all
# complete, none refused.
#   usage: load_smoke.sh LLAMA2 MODELS
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tests/http/server_lib.sh
source "$ROOT/tests/http/server_lib.sh"
http_serve serve -- --model "$MODELS/tiny-gqa" --max-batch-size 64 --max-queue 1024 --quiet
http_up serve
if python3 "$ROOT/benchmarks/http/http_load.py" --url "http://127.0.0.1:$PORT" --model tiny-gqa \
    --rate 20 --duration 3 --max-tokens 16 --vocab 512 --max-p99-e2e 10 \
    --json "$TMP/load.json" >"$TMP/load.out" 2>&1; then
  pass "http_load: $(cat "$TMP/load.out")"
else
  fail "http_load:"; cat "$TMP/load.out"
fi
if python3 "$ROOT/benchmarks/http/http_load.py" --url "http://127.0.0.1:$PORT" --model tiny-gqa \
    --endpoint completions --rate inf --requests 512 --prompt-tokens 16 --max-tokens 16 \
    --vocab 512 --max-p99-e2e 60 >"$TMP/burst.out" 2>&1; then
  pass "512 concurrent streams: $(cat "$TMP/burst.out")"
else
  fail "512 concurrent streams:"; cat "$TMP/burst.out"
fi
http_stop serve
finish
