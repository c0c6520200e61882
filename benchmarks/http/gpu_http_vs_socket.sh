#!/usr/bin/env bash
# Issue 17's HTTP benchmarks on a GPU node (one H200, 7B synthetic fp16), one server for all:
#  1. saturation through the Unix socket (benchmarks/serve/bench_serve.py, the RESULTS.md row:
#     1024 requests at once, 128-token prompts of random ids, 128 new tokens) and through HTTP
#     streaming (http_load.py --endpoint completions: the same prompts as token ids), alternating
#     socket, http, socket, http so both see the same node state;
#  2. p99 TTFT through HTTP at half the measured HTTP saturation rate (requests/s) for 60 s;
#  3. the Gatling-style scenario: 20 new streamed chat completions per second for 60 s, ~128-token
#     prompts, 128 new tokens: TTFT and end-to-end p50/p99, errors.
# The node has no cpp-httplib: carry the single header fetched on the development machine
# (bash benchmarks/http/fetch_httplib.sh -> .httplib/) and this script configures build-gpu with
# -DLLAMA2_HTTPLIB_DIR=.httplib.
#
#   bash benchmarks/http/gpu_http_vs_socket.sh OUT_DIR      (HTTPLIB_DIR=.httplib, NP=1,
#        MAX_BATCH=512, REQUESTS=1024, ROUNDS=2, DURATION=60, HTTP_PROCS=4 (client processes),
#        HTTP_THREAD_NICE (LLAMA2_HTTP_THREAD_NICE for the server), SATURATION_ONLY=1 (no half
#        load, no 20 users/s), N_TRIALS=5 (n = 4 vs n = 1 requests, n_choices.py; 0: none);
#        BUILD_ONLY=1 builds build-gpu/ and stops, SKIP_BUILD=1 reuses it: two calls when one may
#        last at most 10 minutes)
# LLAMA2_BIN, MODEL_ARGS and VOCAB (defaults build-gpu/llama2, the 7B synthetic model, 32000) let
# the same script run on the CPU with a test model (how it was checked before the GPU run).
# Writes OUT_DIR/{socket,http}-<round>.json, half-load.json, users20.json, server.log, summary.md.
set -euo pipefail
OUT=${1:?usage: gpu_http_vs_socket.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.."
source launch/env.sh
NP=${NP:-1}
REQUESTS=${REQUESTS:-1024}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-60}
LLAMA2_BIN=${LLAMA2_BIN:-build-gpu/llama2}
MODEL_ARGS=${MODEL_ARGS:---model tests/models/small-d64 --synthetic 7b}
VOCAB=${VOCAB:-32000}
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  HTTPLIB_DIR=$(cd "${HTTPLIB_DIR:-.httplib}" && pwd) || {
    echo "no ${HTTPLIB_DIR:-.httplib}/: run benchmarks/http/fetch_httplib.sh on the development machine and carry it" >&2
    exit 1
  }
  cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA2_WERROR=ON \
    -DLLAMA2_HTTPLIB_DIR="$HTTPLIB_DIR" >/dev/null
  ninja -C build-gpu llama2 >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log" >&2; exit 1; }
fi
[[ "${BUILD_ONLY:-0}" == 1 ]] && { echo "built build-gpu/llama2"; exit 0; }
sock=$(mktemp -u /tmp/llama2-http.XXXXXX.sock)
timeout 3000 mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$NP" \
  -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS \
  -x "LLAMA2_STEP_LOG=$OUT/steps.txt" ${HTTP_THREAD_NICE:+-x LLAMA2_HTTP_THREAD_NICE=$HTTP_THREAD_NICE} \
  "$LLAMA2_BIN" serve $MODEL_ARGS --socket "$sock" \
  --http 127.0.0.1:0 --served-model-name llama2-7b --max-batch-size "${MAX_BATCH:-512}" \
  --max-queue 4096 --prefill-chunk "${PREFILL_CHUNK:-2048}" ${SERVE_ARGS:-} >"$OUT/server.log" 2>&1 &
server=$!
# Wait for the server to be gone: a second run of this script right after (SERVE_ARGS A/B) must find
# the GPU's memory free (2026-12-04: it did not, and the second server found no room for its cache).
trap 'kill -INT $server 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 900); do grep -q "HTTP on" "$OUT/server.log" && break; sleep 0.2; done
port=$(sed -n 's/.*HTTP on 127.0.0.1:\([0-9]*\).*/\1/p' "$OUT/server.log")
[[ -n $port ]] || { echo "server did not start" >&2; cat "$OUT/server.log" >&2; exit 1; }
url=http://127.0.0.1:$port
tok_s() { python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["results"]
r = r[0] if isinstance(r, list) else r
print(round(r["generated_tok_s"]))' "$1"; }
field() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["results"][sys.argv[2]])' "$1" "$2"; }

# Warm-up (first steps compile nothing, but allocate and fill caches), then the alternation.
python3 benchmarks/http/http_load.py --url "$url" --model llama2-7b --endpoint completions \
  --rate inf --requests 64 --vocab "$VOCAB" >/dev/null
# segment NAME CMD...: runs CMD and notes which lines of the server's step log it covered, so that
# the engine's own time per round (steps + host time between them) can be compared with what the
# client measured; the client's CPU seconds go to NAME.time.
segment() {
  local name=$1 from
  shift
  from=$(wc -l <"$OUT/steps.txt" 2>/dev/null || echo 0)
  local TIMEFORMAT="client: %R s wall, %U s user, %S s sys"
  { time "$@" | tee "$OUT/$name.log"; } 2>"$OUT/$name.time"
  echo "$name $from $(wc -l <"$OUT/steps.txt")" >>"$OUT/segments.txt"
}
for ((r = 1; r <= ROUNDS; r++)); do
  segment "socket-$r" python3 benchmarks/serve/bench_serve.py --socket "$sock" --rates inf \
    --requests "$REQUESTS" --prompt-len 128 --max-new-tokens 128 --vocab "$VOCAB" --json "$OUT/socket-$r.json"
  # HTTP_PROCS client processes (default 4): one Python process parsing ~14k SSE chunks a second
  # could be the limit itself.
  segment "http-$r" python3 benchmarks/http/http_load.py --url "$url" --model llama2-7b \
    --endpoint completions --rate inf --requests "$REQUESTS" --vocab "$VOCAB" \
    --procs "${HTTP_PROCS:-4}" --json "$OUT/http-$r.json"
done
if [[ ${SATURATION_ONLY:-0} == 1 ]]; then DURATION=0; fi
# Half load: half of the HTTP saturation's completed requests per second.
half=$(python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["results"]
print(round(r["completed"] / r["span_s"] / 2, 2))' "$OUT/http-$ROUNDS.json")
[[ $DURATION == 0 ]] || python3 benchmarks/http/http_load.py --url "$url" --model llama2-7b --endpoint completions \
  --rate "$half" --duration "$DURATION" --vocab "$VOCAB" --json "$OUT/half-load.json" | tee "$OUT/half-load.log"
[[ $DURATION == 0 ]] || python3 benchmarks/http/http_load.py --url "$url" --model llama2-7b --endpoint chat \
  --rate 20 --duration "$DURATION" --json "$OUT/users20.json" | tee "$OUT/users20.log"
curl -s "$url/metrics" >"$OUT/metrics.txt" || true
# Issue 35's n figure on the now idle server: n = 4 against n = 1, and the n = 4 prefix-cache hits.
if [[ ${N_TRIALS:-5} -gt 0 ]]; then
  python3 benchmarks/http/n_choices.py --url "$url" --model llama2-7b --trials "${N_TRIALS:-5}" \
    --vocab "$VOCAB" --json "$OUT/n_choices.json" | tee "$OUT/n_choices.txt"
fi

{
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 || true)
  echo "# HTTP vs Unix socket: $MODEL_ARGS, ${gpu:-no GPU}, $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo
  echo "| round | socket tok/s | HTTP tok/s | HTTP / socket |"
  echo "| --- | --- | --- | --- |"
  for ((r = 1; r <= ROUNDS; r++)); do
    s=$(tok_s "$OUT/socket-$r.json"); h=$(tok_s "$OUT/http-$r.json")
    echo "| $r | $s | $h | $(python3 -c "print(f'{$h / $s:.3f}')") |"
  done
  echo
  echo "The engine's side of each round (rank 0's step log: steps, GPU step time, host time between"
  echo "steps, generated tokens / (steps + host time)); the client's CPU:"
  echo
  python3 - "$OUT/steps.txt" "$OUT/segments.txt" "$OUT" <<'PY'
import sys
lines = [l.split() for l in open(sys.argv[1]) if l.strip() and not l.startswith("#")]
print("| round | steps | step ms | host ms | engine tok/s | client |")
print("| --- | --- | --- | --- | --- | --- |")
for seg in open(sys.argv[2]):
    name, a, b = seg.split()
    rows = lines[int(a):int(b)]
    step_ms = sum(float(f[4]) for f in rows)
    host_ms = sum(float(f[5]) for f in rows if len(f) > 5)
    tokens = sum(int(f[3]) for f in rows)  # logit rows: one generated token each
    client = open(f"{sys.argv[3]}/{name}.time").read().strip().splitlines()[-1]
    print(f"| {name} | {len(rows)} | {step_ms:.0f} | {host_ms:.0f} | "
          f"{tokens / ((step_ms + host_ms) / 1000):.0f} | {client} |")
PY
  echo
  [[ $DURATION == 0 ]] && exit 0
  echo "Half load ($half req/s for ${DURATION} s, HTTP streaming): TTFT p50 $(field "$OUT/half-load.json" ttft_p50_s) s," \
       "p99 $(field "$OUT/half-load.json" ttft_p99_s) s; errors $(field "$OUT/half-load.json" errors)"
  echo
  echo "20 users/s for ${DURATION} s (streamed chat, ~128 + 128 tokens): TTFT p50 $(field "$OUT/users20.json" ttft_p50_s) s," \
       "p99 $(field "$OUT/users20.json" ttft_p99_s) s; end-to-end p50 $(field "$OUT/users20.json" e2e_p50_s) s," \
       "p99 $(field "$OUT/users20.json" e2e_p99_s) s; completed $(field "$OUT/users20.json" completed);" \
       "errors $(field "$OUT/users20.json" errors)"
} | tee "$OUT/summary.md"
