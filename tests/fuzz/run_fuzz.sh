#!/usr/bin/env bash
# Builds the libFuzzer target tests/fuzz/fuzz_frames.cpp (frame decoder + JSON + request
# classifier) with ASan and UBSan, and runs it for a bounded time from a seed corpus of valid
# frames. Exit status: 0 no finding; non-zero a crash, leak, sanitizer report or build failure
# (libFuzzer's reproducer then lies in $FUZZ_OUT/crash-*; rerun with `$FUZZ_OUT/fuzz_frames FILE`).
#   usage: tests/fuzz/run_fuzz.sh
#   env:   FUZZ_SECONDS (30)  FUZZ_OUT (build/fuzz)  FUZZ_CXX (clang++-14, else clang++)
#          FUZZ_MAX_LEN (65536: long enough for multi-frame streams and deep nesting)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${FUZZ_OUT:-$root/build/fuzz}
cxx=${FUZZ_CXX:-$(command -v clang++-14 || command -v clang++ || true)}
if [[ -z "$cxx" ]]; then
  echo "run_fuzz.sh: clang++ not found (Debian: apt-get install -y clang-14 libclang-rt-14-dev)" >&2
  exit 2
fi
mkdir -p "$out/seeds" "$out/corpus"

# -fno-sanitize-recover: a UBSan report must fail the run, not scroll past.
"$cxx" -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -pthread -I"$root/src" \
  "$root/tests/fuzz/fuzz_frames.cpp" "$root/src/client/client.cpp" "$root/src/common/frame.cpp" \
  "$root/src/common/check.cpp" "$root/src/common/sampling_params.cpp" \
  -o "$out/fuzz_frames"

# Seeds: valid frames of every op and event, so mutations start inside the protocol.
frame() {  # frame PAYLOAD -> 4-byte big-endian length + PAYLOAD (byte length, not characters)
  local n
  n=$(LC_ALL=C; printf '%s' "$1" | wc -c)
  printf "\\x$(printf %02x $((n >> 24 & 255)))\\x$(printf %02x $((n >> 16 & 255)))"
  printf "\\x$(printf %02x $((n >> 8 & 255)))\\x$(printf %02x $((n & 255)))"
  printf '%s' "$1"
}
s=$out/seeds
frame '{"op":"health"}' > "$s/health"
frame '{"op":"stats"}' > "$s/stats"
frame '{"op":"cancel","id":"r1"}' > "$s/cancel"
frame '{"op":"generate","id":"r1","prompt":"Hello"}' > "$s/generate"
frame '{"op":"generate","id":"r2","prompt":"h\u00e9 \u4e16 ü","max_new_tokens":64,"temperature":0.7,"top_p":0.9,"top_k":40,"repetition_penalty":1.1,"seed":42,"stop":["\n\n","END"],"ignore_eos":false,"stream":true,"timeout_ms":30000}' > "$s/generate_full"
frame '{"op":"generate","id":"r3","prompt_tokens":[1,450,4996],"stream":false,"seed":null}' > "$s/generate_tokens"
{ frame '{"op":"generate","id":"a","prompt":"x"}'; frame '{"op":"generate","id":"b","prompt":"y"}'
  frame '{"op":"cancel","id":"a"}'; frame '{"op":"health"}'; } > "$s/pipeline"
{ frame '{"event":"token","id":"a","index":0,"token_id":450,"text":"The"}'
  frame '{"event":"done","id":"a","finish_reason":"stop","usage":{"prompt_tokens":5,"completion_tokens":17},"timings":{"queue_s":0.001,"time_to_first_token_s":0.02,"total_s":0.31}}'
  frame '{"event":"error","id":"b","code":"queue_full","message":"queue is full"}'; } > "$s/events"
printf '\x00\x00\x00\x00' > "$s/length0"
printf '\x00\x10\x00\x01{}' > "$s/too_long"

cat > "$out/json.dict" <<'DICT'
"\"op\""
"\"id\""
"\"generate\""
"\"cancel\""
"\"health\""
"\"stats\""
"\"prompt\""
"\"prompt_tokens\""
"\"max_new_tokens\""
"\"temperature\""
"\"top_p\""
"\"top_k\""
"\"repetition_penalty\""
"\"seed\""
"\"stop\""
"\"ignore_eos\""
"\"stream\""
"\"timeout_ms\""
"\"event\""
"null"
"true"
"false"
"1e400"
"-0"
"18446744073709551616"
"\"\\u0000\""
"\"\\ud800\""
"\x00\x10\x00\x00"
DICT

cd "$out"
exec "$out/fuzz_frames" -max_total_time="${FUZZ_SECONDS:-30}" -max_len="${FUZZ_MAX_LEN:-65536}" \
  -timeout=10 -rss_limit_mb=4096 -dict="$out/json.dict" -artifact_prefix="$out/" \
  -print_final_stats=1 "$out/corpus" "$out/seeds"
