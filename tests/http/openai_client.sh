#!/usr/bin/env bash
# `llama2 serve --http` end to end: a real 2-rank server on the CPU backend with an API key, small
# batch, queue, length and body limits; plain curl checks, then the official OpenAI Python client
# (test_openai_client.py under pytest; its last test drains the server with SIGTERM to rank 0),
# then the job must exit 0. The model is made here, 512 wide and 4 layers deep with tiny-gqa's
# tokenizer, so that a generation lasts long enough (~1 ms a token) to fill the queue, hang up
# mid-stream or drain.
#   usage: openai_client.sh LLAMA2 MODELS
# The client runs on the repository's .venv/bin/python (openai and pytest pinned in
# launch/requirements-test.txt; launch/install-deps.sh --test makes it), or on $LLAMA2_PYTHON.
# Without them the test is skipped (exit 77, ctest's SKIP_RETURN_CODE), and fails when CI=true.
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=tests/test_python.sh
source "$HERE/../test_python.sh"
# shellcheck source=tests/http/server_lib.sh
source "$HERE/server_lib.sh"
test_python http.openai_client openai pytest
# Refused flags: one message naming the rule, before the engine opens.
run_capture open 2 serve --model "$MODELS/tiny-gqa" --socket "$TMP/x.sock" --http 0.0.0.0:0
expect_failure open "is not a loopback address and no API key is set"
run_capture port 2 serve --model "$MODELS/tiny-gqa" --socket "$TMP/x.sock" --http 127.0.0.1:99999
expect_failure port "--http must be HOST:PORT or PORT with PORT in \[0, 65535\]"
run_capture alog 2 serve --model "$MODELS/tiny-gqa" --socket "$TMP/x.sock" --http 127.0.0.1:0 --access-log yes
expect_failure alog '--access-log must be off, text or json (got "yes")'
run_capture origins 2 serve --model "$MODELS/tiny-gqa" --socket "$TMP/x.sock" --http 127.0.0.1:0 --allowed-origins example.com
expect_failure origins '--allowed-origins: "example.com" is not an origin'
run_capture keyfile 2 serve --model "$MODELS/tiny-gqa" --socket "$TMP/x.sock" --http 127.0.0.1:0 --api-key-file "$TMP/no-such-keys"
expect_failure keyfile "--api-key-file: cannot read $TMP/no-such-keys (No such file or directory)"
"$LLAMA2" make-test-model --out "$TMP/model" --hidden-size 512 --intermediate-size 1376 \
  --layers 4 --heads 8 --kv-heads 2 --vocab 512 --max-position-embeddings 1024 \
  --tokenizer "$MODELS/tiny-gqa/tokenizer.model" >"$TMP/make.log" 2>&1 || { fail "make-test-model"; cat "$TMP/make.log"; }
export API_KEY=test-key-$RANDOM MODEL=test-model ALIAS=test-model-alias MAX_SEQ_LEN=512
export TOKENIZER=$MODELS/tiny-gqa/tokenizer.model
# The operations flags (tests/http/test_ops.py): a key file beside $LLAMA2_API_KEY, the JSON access
# log on stderr (serve.log), CORS for one origin.
export KEY_FILE=$TMP/api-keys FILE_KEY=file-key-$RANDOM ORIGIN=http://localhost:3000 SERVE_LOG=$TMP/serve.log
printf '# test keys\n\n%s\n' "$FILE_KEY" >"$KEY_FILE"
# LLAMA2_TEST_HTTP_START_DELAY_MS holds rank 0 between binding the port and loading the model, as
# a large model's load would: the front must answer 503 "starting" meanwhile, then serve.
http_serve serve LLAMA2_TEST_HTTP_START_DELAY_MS=2000 LLAMA2_API_KEY="$API_KEY" -- --model "$TMP/model" \
  --served-model-name "$MODEL,$ALIAS" --max-batch-size 2 --max-queue 2 --max-seq-len "$MAX_SEQ_LEN" \
  --cpu-threads 1 --http-max-body-bytes 65536 --api-key-file "$KEY_FILE" --access-log json \
  --allowed-origins "$ORIGIN" --quiet
http_wait serve "HTTP bound to"
PORT=$(sed -n 's/.*HTTP bound to 127.0.0.1:\([0-9]*\).*/\1/p' "$TMP/serve.log")
if [[ -n $PORT ]] && ! grep -q "HTTP on" "$TMP/serve.log"; then
  code=$(curl -s -m 10 -o "$TMP/h0.json" -w '%{http_code}' "http://127.0.0.1:$PORT/health")
  [[ $code == 200 ]] && grep -q '"status":"starting"' "$TMP/h0.json" \
    && pass "curl: GET /health (liveness) 200 starting while the model loads" || fail "curl /health while starting: $code $(cat "$TMP/h0.json")"
  code=$(curl -s -m 10 -o "$TMP/r0.json" -w '%{http_code}' "http://127.0.0.1:$PORT/ready")
  [[ $code == 503 ]] && grep -q '"status":"starting"' "$TMP/r0.json" \
    && pass "curl: GET /ready 503 starting while the model loads" || fail "curl /ready while starting: $code $(cat "$TMP/r0.json")"
  code=$(curl -s -m 10 -o "$TMP/c0.json" -w '%{http_code}' -H "Authorization: Bearer $API_KEY" \
    "http://127.0.0.1:$PORT/v1/completions" -d '{"model":"test-model","prompt":"Hi"}')
  [[ $code == 503 ]] && grep -q '"code":"starting"' "$TMP/c0.json" \
    && pass "curl: a completion while starting gets 503 starting" || fail "curl completion while starting: $code $(cat "$TMP/c0.json")"
else
  fail "the front did not report its port before the model loaded: $(cat "$TMP/serve.log")"
fi
bound=$PORT
http_up serve
[[ $PORT == "$bound" ]] || fail "the front bound port $bound, then served on $PORT"
export BASE=http://127.0.0.1:$PORT
# Rank 0: test_openai_client.py's last test drains it with SIGTERM.
SERVER_PID=$(http_rank0 serve)
export SERVER_PID

# ---- curl: status, headers and bodies as any HTTP client sees them.
c() { curl -s -m 30 -H "Authorization: Bearer $API_KEY" -H 'Content-Type: application/json' "$@"; }
code=$(curl -s -m 10 -o "$TMP/h.json" -w '%{http_code}' "$BASE/health")
[[ $code == 200 ]] && grep -q '"status":"ready"' "$TMP/h.json" && pass "curl: GET /health 200 ready" || fail "curl /health: $code $(cat "$TMP/h.json")"
c "$BASE/v1/chat/completions" -d '{"model":"test-model","messages":[{"role":"user","content":"Hi"}],"max_tokens":8,"temperature":0}' >"$TMP/c.json"
python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert r["object"]=="chat.completion" and r["usage"]["completion_tokens"]<=8 and r["choices"][0]["message"]["role"]=="assistant", r' "$TMP/c.json" \
  && pass "curl: chat completion" || fail "curl chat: $(cat "$TMP/c.json")"
c -N "$BASE/v1/completions" -d '{"model":"test-model","prompt":"Hi","max_tokens":6,"temperature":0,"ignore_eos":true,"stream":true}' >"$TMP/s.txt"
[[ $(grep -c '^data: {' "$TMP/s.txt") -ge 7 && $(tail -n2 "$TMP/s.txt" | head -n1) == "data: [DONE]" ]] \
  && pass "curl: SSE stream of 6 tokens + finish chunk, ending data: [DONE]" || fail "curl stream: $(cat "$TMP/s.txt")"
code=$(c -o "$TMP/e.json" -w '%{http_code}' "$BASE/v1/completions" -d '{"model":"test-model","prompt":"x","best_of":2}')
[[ $code == 400 ]] && python3 -c 'import json,sys; e=json.load(open(sys.argv[1]))["error"]; assert set(e)=={"message","type","param","code"} and e["param"]=="best_of", e' "$TMP/e.json" \
  && pass "curl: 400 in OpenAI's error shape" || fail "curl 400: $code $(cat "$TMP/e.json")"
code=$(c -o /dev/null -w '%{http_code}' "$BASE/v1/completions" -d '{"model":"test-model",')
[[ $code == 400 ]] && pass "curl: malformed JSON 400" || fail "curl malformed: $code"
code=$(curl -s -m 10 -o /dev/null -w '%{http_code}' "$BASE/metrics")
[[ $code == 200 ]] && pass "curl: GET /metrics 200 without a key" || fail "curl metrics: $code"

# ---- a streaming client that stops reading (1 KB receive buffer, never reads) delays nobody: the
# engine only fills its mailbox; another request meanwhile completes at once, and afterwards no
# request runs and no KV block is held.
if python3 - "$PORT" "$API_KEY" >"$TMP/stall.out" 2>&1 <<'PY'
import json, socket, subprocess, sys, time
port, key = int(sys.argv[1]), sys.argv[2]
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
s.connect(("127.0.0.1", port))
body = json.dumps({"model": "test-model", "prompt": "Once", "max_tokens": 450, "ignore_eos": True, "stream": True})
s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
           f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
time.sleep(0.5)
t0 = time.time()
other = subprocess.run(["curl", "-s", "-m", "30", f"http://127.0.0.1:{port}/v1/completions", "-H", f"Authorization: Bearer {key}",
                        "-H", "Content-Type: application/json", "-d", json.dumps({"model": "test-model", "prompt": "Hi", "max_tokens": 8})],
                       capture_output=True, text=True)
took = time.time() - t0
assert json.loads(other.stdout)["usage"]["completion_tokens"] >= 1, other.stdout
print(f"another request completed in {took:.2f} s beside a client that does not read")
assert took < 20, took
s.close()  # the stalled stream's connection goes away: its request ends (cancelled or already done)
for _ in range(300):
    m = subprocess.run(["curl", "-s", f"http://127.0.0.1:{port}/metrics"], capture_output=True, text=True).stdout
    v = {l.split()[0]: float(l.split()[1]) for l in m.splitlines() if l.startswith(("llama2_requests_running ", "llama2_kv_cache_usage_ratio "))}
    if v.get("llama2_requests_running") == 0 and v.get("llama2_kv_cache_usage_ratio") == 0:
        print("then nothing running and the KV cache empty"); break
    time.sleep(0.1)
else:
    sys.exit(f"still running after 30 s: {v}")
PY
then
  pass "slow reader: $(tr '\n' ';' <"$TMP/stall.out")"
else
  fail "slow reader:"; cat "$TMP/stall.out"
fi

# ---- a second server on the same model: --strict-api, and a 2 s request timeout for the
# timeout's finish_reason (tests that use it name STRICT_BASE). Steps of 5 ms at least (the test
# hook): 1000 tokens cannot finish within the timeout, 4 tokens always do, however loaded the
# machine (a 200 ms timeout without the hook once cut a 4-token request short).
http_serve strict LLAMA2_TEST_STEP_DELAY_MS=5 LLAMA2_API_KEY="$API_KEY" -- --model "$TMP/model" \
  --served-model-name "$MODEL" --max-batch-size 2 --max-seq-len 1024 --strict-api \
  --request-timeout-ms 2000 --cpu-threads 1 --quiet
http_up strict STRICT_PORT
export STRICT_BASE=http://127.0.0.1:$STRICT_PORT

# ---- the OpenAI Python client (drains the server at the end).
http_pytest "openai python client" 240 "$HERE/test_ops.py" "$HERE/test_openai_client.py"
# The strict server: rank 0 drains on SIGTERM and the job exits 0.
http_stop strict
# Each ignored field is logged once, however many requests carried it (the suite sends `store`
# in several).
n=$(grep -c 'ignoring the request field "store"' "$TMP/serve.log")
[[ $n == 1 ]] && pass "the ignored field \"store\" was logged once" || fail "\"store\" logged $n times: $(grep ignoring "$TMP/serve.log")"
# The main server, drained by the client suite, exits 0.
http_end serve
# The access log (--access-log json): every JSON line of serve.log parses; test_ops.py's requests
# have their lines with the fields the issue names, and the replaced id's note.
if python3 - "$TMP/serve.log" >"$TMP/access.out" 2>&1 <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8") if l.startswith("{")]
access = [l for l in lines if "status" in l]
by_id = {l["request_id"]: l for l in access}
plain = by_id["OPS_plain-1"]
assert plain["route"] == "/v1/completions" and plain["method"] == "POST" and plain["status"] == 200, plain
assert plain["model"] == "test-model" and plain["completion_tokens"] == 6 and plain["prompt_tokens"] >= 2, plain
assert plain["ttft_ms"] is not None and plain["total_ms"] >= plain["ttft_ms"] and plain["cached_tokens"] >= 0, plain
assert plain["client"].startswith("127.0.0.1:") and plain["time"].endswith("Z"), plain
stream = by_id["OPS_stream-2"]
assert stream["route"] == "/v1/chat/completions" and stream["completion_tokens"] == 6, stream
assert any(l["status"] == 401 for l in access) and any(l["method"] == "OPTIONS" for l in access)
notes = [l for l in lines if "note" in l]
replaced = [n for n in notes if "replaced by a generated id" in n["note"]]
assert replaced and all(n["request_id"] in by_id for n in replaced), replaced
print(f"{len(access)} access lines, {len(notes)} notes")
PY
then
  pass "access log (json): $(cat "$TMP/access.out")"
else
  fail "access log:"; cat "$TMP/access.out"
fi
finish
