#!/usr/bin/env bash
# FUZZ_TARGET=constrain builds and runs tests/fuzz/fuzz_constrain.cpp instead (the constraint
# engine's compilers and matcher; seeds and dictionary of its own); the rest of this header is
# about the default target, requests.
# Builds the libFuzzer target tests/fuzz/fuzz_requests.cpp (the whole request path of `llama2
# serve`: frame decoder -> JSON -> request validation -> tokenizer -> error reply -> framing) with
# ASan and UBSan, and runs it from a seed corpus for a bounded time or number of executions.
# Exit status: 0 no finding; non-zero a crash, leak, sanitizer report or build failure
# (libFuzzer's reproducer then lies in $FUZZ_OUT/crash-*; rerun with `$FUZZ_OUT/fuzz_requests FILE`).
# The last line says how many executions ran in how many seconds. Recorded (tests/fuzz/README.md):
# FUZZ_RUNS=1000000 FUZZ_SECONDS=3600 -> 1,000,000 executions in 1,131 s (884/s, 2-core VM), no
# finding.
#   usage: tests/fuzz/run_fuzz.sh
#   env:   FUZZ_SECONDS (30: time bound)  FUZZ_RUNS (unset: no bound on executions)
#          FUZZ_OUT (build/fuzz)  FUZZ_CXX (clang++-19, else clang++)
#          FUZZ_MAX_LEN (65536: long enough for multi-frame streams and deep nesting)
#          FUZZ_TARGET (requests | constrain)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${FUZZ_OUT:-$root/build/fuzz}
cxx=${FUZZ_CXX:-$(command -v clang++-19 || command -v clang++ || true)}
if [[ -z "$cxx" ]]; then
  echo "run_fuzz.sh: clang++ not found (Debian: apt-get install -y clang-19 libclang-rt-19-dev)" >&2
  exit 2
fi
target=${FUZZ_TARGET:-requests}
case "$target" in
  requests | constrain) ;;
  *)
    echo "run_fuzz.sh: unknown FUZZ_TARGET '$target' (requests, constrain)" >&2
    exit 2
    ;;
esac
if [[ $target == constrain ]]; then out=$out/constrain; fi
mkdir -p "$out/seeds" "$out/corpus"

# One object per source, compiled in parallel through ccache when it is installed (a rebuild after
# a change recompiles what changed). -fno-sanitize-recover: a UBSan report must fail the run.
sources=(tests/fuzz/fuzz_requests.cpp src/coordinator/serving/protocol.cpp src/coordinator/requests/request.cpp
  src/coordinator/requests/codes.cpp
  src/coordinator/serving/token_bound.cpp src/coordinator/text/tokenizer.cpp
  src/coordinator/text/chat_format.cpp src/coordinator/http/openai_api.cpp
  src/coordinator/http/api_fields.cpp src/common/frame.cpp
  src/common/check.cpp src/common/sampling_params.cpp src/common/model_config.cpp
  src/common/checkpoint_quant.cpp src/common/meta_params.cpp src/common/sentencepiece_model.cpp
  src/coordinator/requests/request_constraint.cpp src/coordinator/http/structured_fields.cpp
  src/coordinator/requests/request_tools.cpp src/coordinator/requests/tool_call_reader.cpp
  src/coordinator/text/chat_tools.cpp)
for f in "$root"/src/coordinator/constrain/*.cpp; do sources+=("${f#"$root"/}"); done
if [[ $target == constrain ]]; then
  sources=(tests/fuzz/fuzz_constrain.cpp src/coordinator/text/tokenizer.cpp src/common/frame.cpp
    src/common/check.cpp)
  for f in "$root"/src/coordinator/constrain/*.cpp; do sources+=("${f#"$root"/}"); done
fi
flags=(-std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
  -pthread -I"$root/src" -DFUZZ_MODEL_DIR="\"$root/tests/models/tiny-gqa\"")
launcher=$(command -v ccache || true)
mkdir -p "$out/obj"
objs=()
for f in "${sources[@]}"; do
  objs+=("$out/obj/$(echo "$f" | tr / _).o")
  $launcher "$cxx" "${flags[@]}" -c "$root/$f" -o "${objs[-1]}" &
  while (($(jobs -rp | wc -l) >= $(nproc))); do wait -n; done
done
while (($(jobs -rp | wc -l) > 0)); do wait -n; done
"$cxx" "${flags[@]}" "${objs[@]}" -lsentencepiece -o "$out/fuzz_$target"
if [[ $target == constrain ]]; then
  s=$out/seeds
  # First byte: the kind (0 schema, 1 json_object, 2 regex, 3 choice, 4 GBNF, 5 tool calls;
  # +0x80: no spaces).
  printf '\x00{"type":"object","properties":{"a":{"type":"integer","minimum":-5,"maximum":50},"b":{"enum":["x","y z"]},"c":{"type":"array","items":{"type":"string","maxLength":3},"maxItems":2}},"required":["a"]}' > "$s/schema"
  printf '\x00{"$defs":{"n":{"type":"object","properties":{"k":{"$ref":"#/$defs/n"},"v":{"type":["number","null"],"exclusiveMinimum":0.5}}}},"$ref":"#/$defs/n"}' > "$s/schema_ref"
  printf '\x80{"anyOf":[{"type":"string","pattern":"^a+b$"},{"const":[1,2]},{"type":"boolean"}]}' > "$s/schema_anyof"
  printf '\x01' > "$s/json_object"
  printf '\x02(a|bc)*[x-z]{1,3}\\d?\\.(?:\xc3\xa9|\xe4\xb8\xad)+' > "$s/regex"
  printf '\x02(a*)*b|(a|aa)*c' > "$s/regex_catastrophic"
  printf '\x03yes\nno\nmaybe later\n\xc3\xa9t\xc3\xa9' > "$s/choice"
  printf '\x04root ::= item ("," item)*\nitem ::= [a-z]+ | "(" root ")" # nested\n' > "$s/gbnf"
  printf '\x04root ::= a\na ::= a "x" | "y"\n' > "$s/gbnf_left"
  printf '\x05{"mode":"auto","parallel":true,"tools":[{"name":"f","parameters":{"type":"object","properties":{"a":{"enum":[1,2]}}}},{"name":"g","parameters":{}}]}' > "$s/tool_calls"
  cat > "$out/json.dict" <<'DICT'
"\"type\""
"\"object\""
"\"properties\""
"\"required\""
"\"additionalProperties\""
"\"items\""
"\"prefixItems\""
"\"enum\""
"\"const\""
"\"anyOf\""
"\"oneOf\""
"\"allOf\""
"\"$ref\""
"\"$defs\""
"\"#/$defs/\""
"\"pattern\""
"\"minLength\""
"\"maxLength\""
"\"minItems\""
"\"maxItems\""
"\"minimum\""
"\"maximum\""
"\"exclusiveMinimum\""
"\"exclusiveMaximum\""
"\"string\""
"\"integer\""
"\"number\""
"\"boolean\""
"\"null\""
"\"array\""
"::="
"root"
"\"tools\""
"\"parameters\""
"\"parallel\""
"\"auto\""
"(?:"
"{2,5}"
"[^"
"\\u00e9"
DICT
  cd "$out"
  log=$out/last_run.log
  SECONDS=0
  status=0
  "$out/fuzz_constrain" -max_total_time="${FUZZ_SECONDS:-30}" -runs="${FUZZ_RUNS:--1}" \
    -max_len="${FUZZ_MAX_LEN:-4096}" -timeout=10 -rss_limit_mb=2048 -dict="$out/json.dict" \
    -artifact_prefix="$out/" -print_final_stats=1 "$out/corpus" "$out/seeds" > "$log" 2>&1 ||
    status=$?
  grep -v -e '^#[0-9].*\(NEW\|REDUCE\|pulse\)' "$log" | tail -n 40
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  echo "run_fuzz.sh: ${runs:-?} executions of the constraint compilers in ${SECONDS} s (exit status $status)"
  exit "$status"
fi

frame() {  # frame PAYLOAD -> 4-byte big-endian length + PAYLOAD (byte length, not characters)
  local n
  n=$(LC_ALL=C; printf '%s' "$1" | wc -c)
  printf "\\x$(printf %02x $((n >> 24 & 255)))\\x$(printf %02x $((n >> 16 & 255)))"
  printf "\\x$(printf %02x $((n >> 8 & 255)))\\x$(printf %02x $((n & 255)))"
  printf '%s' "$1"
}
s=$out/seeds
# Frames of every op and event, so mutations start inside the protocol.
frame '{"op":"health"}' > "$s/health"
frame '{"op":"stats"}' > "$s/stats"
frame '{"op":"cancel","id":"r1"}' > "$s/cancel"
frame '{"op":"generate","id":"r1","prompt":"Hello"}' > "$s/generate"
frame '{"op":"generate","id":"r2","prompt":"h\u00e9 \u4e16 ü","max_new_tokens":64,"temperature":0.7,"top_p":0.9,"top_k":40,"repetition_penalty":1.1,"seed":42,"stop":["\n\n","END"],"ignore_eos":false,"stream":true,"timeout_ms":30000}' > "$s/generate_full"
frame '{"op":"generate","id":"r3","prompt_tokens":[1,450,4996],"stream":false,"seed":null}' > "$s/generate_tokens"
frame '{"op":"generate","id":"t","messages":[{"role":"user","content":"w?"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"ok"},{"role":"user","content":"and?"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":{"type":"integer"}}}}}],"tool_choice":"auto","parallel_tool_calls":false}' > "$s/generate_tools"
{ frame '{"op":"generate","id":"a","prompt":"x"}'; frame '{"op":"generate","id":"b","prompt":"y"}'
  frame '{"op":"cancel","id":"a"}'; frame '{"op":"health"}'; } > "$s/pipeline"
printf '\x00\x00\x00\x00' > "$s/length0"
printf '\x00\x10\x00\x01{}' > "$s/too_long"
# Single payloads with repeat markers (fuzz_requests.cpp): huge keys, ops, ids, token strings,
# escape-heavy strings and long prompts, the shapes of the frames that once crashed rank 0.
printf '{"op":"generate","id":"a","prompt":"x","k\xfd\xff":1}' > "$s/huge_key"
printf '{"op":"o\xfd\xff"}' > "$s/huge_op"
printf '{"op":"generate","id":"t","prompt_tokens":["s\xfd\xff"]}' > "$s/huge_token_string"
printf '{"op":"generate","id":"q","prompt_tokens":["\\"\xfe\xff"]}' > "$s/escaped_quotes"
printf '{"op":"cancel","id":"i\xfd\xff"}' > "$s/huge_id"
printf '{"op":"nope","id":{"a":["\\u0001\xfe\x40"]}}' > "$s/structured_id"
printf '{"op":"generate","id":"p","prompt":"Hello world \xfd\xff","max_new_tokens":8}' > "$s/long_prompt"
printf '{"op":"generate","id":"p","prompt":"ab\xfe\x08","max_new_tokens":8}' > "$s/mid_prompt"
printf '{"op":"generate","id":"p","prompt":"\\n\\t\\u00e9\xfe\x10"}' > "$s/escaped_prompt"

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
"\"logprobs\""
"\"top_logprobs\""
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
"\\\""
"\xfd\xff"
"\xfe\x80"
"\x00\x10\x00\x00"
DICT

cd "$out"
log=$out/last_run.log
SECONDS=0
status=0
"$out/fuzz_requests" -max_total_time="${FUZZ_SECONDS:-30}" -runs="${FUZZ_RUNS:--1}" \
  -max_len="${FUZZ_MAX_LEN:-65536}" -timeout=10 -rss_limit_mb=4096 -dict="$out/json.dict" \
  -artifact_prefix="$out/" -print_final_stats=1 "$out/corpus" "$out/seeds" > "$log" 2>&1 ||
  status=$?
grep -v -e '^#[0-9].*\(NEW\|REDUCE\|pulse\)' "$log" | tail -n 40
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
echo "run_fuzz.sh: ${runs:-?} executions of the request path in ${SECONDS} s (exit status $status)"
exit "$status"
