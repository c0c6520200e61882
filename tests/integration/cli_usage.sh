#!/usr/bin/env bash
# Usage errors exit 2 with a message and the help; invalid sampling values name the parameter.
source "$(dirname "$0")/lib.sh" "$@"

expect_rc() {  # expect_rc NAME RC PATTERN
  local rc; rc=$(rc_of "$1")
  if [[ $rc -ne $2 ]]; then fail "$1: exit $rc, expected $2"; sed 's/^/    /' "$TMP/$1.err"; return; fi
  if ! grep -q -- "$3" "$TMP/$1.err" "$TMP/$1.out"; then fail "$1: no '$3' in output"; return; fi
  pass "$1: exit $rc, '$3'"
}

run_capture unknown_flag 2 generate --model "$MODELS/tiny-mha" --prompt hi --bogus 3
expect_rc unknown_flag 2 "bogus"
run_capture missing_value 2 generate --model "$MODELS/tiny-mha" --prompt
expect_rc missing_value 2 "prompt"
run_capture no_model 2 generate --prompt hi
expect_rc no_model 2 "--model is required"
run_capture two_prompts 1 generate --model "$MODELS/tiny-mha" --prompt hi --prompt-tokens 1,2
expect_rc two_prompts 2 "exactly one of"
run_capture fraction 1 generate --model "$MODELS/tiny-mha" --prompt hi --gpu-memory-fraction 3
expect_rc fraction 2 "gpu-memory-fraction must be in (0, 1\] (got 3)"
run_capture threads 2 batch --model "$MODELS/tiny-mha" --input /dev/null --output "$TMP/t.jsonl" --cpu-threads -3
expect_rc threads 2 "cpu-threads must be 0 (automatic) or 1..1024 (got -3)"
LLAMA2_CPU_SPLIT=diagonal run_capture cpu_split 2 generate --model "$MODELS/tiny-mha" --prompt hi --backend cpu
expect_failure cpu_split "LLAMA2_CPU_SPLIT=diagonal: expected auto, columns or rows"
run_capture help 2 generate --help
expect_rc help 0 "Usage:"
[[ $(grep -c "Usage:" "$TMP/help.out") -eq 1 ]] && pass "help printed once" || fail "help printed $(grep -c Usage: "$TMP/help.out") times"

run_capture temp 2 generate --model "$MODELS/tiny-mha" --prompt hi --temperature -0.5
expect_failure temp "temperature must be >= 0"
run_capture topp 2 generate --model "$MODELS/tiny-mha" --prompt hi --top-p 1.5
expect_failure topp "top_p must be in (0, 1\]"
run_capture topk 2 generate --model "$MODELS/tiny-mha" --prompt hi --top-k -3
expect_failure topk "top_k must be >= 0"
run_capture penalty 2 generate --model "$MODELS/tiny-mha" --prompt hi --repetition-penalty 0
expect_failure penalty "repetition_penalty must be > 0"
run_capture presence 2 generate --model "$MODELS/tiny-mha" --prompt hi --presence-penalty 2.5
expect_failure presence "presence_penalty must be in \[-2, 2\] (got 2.5)"
run_capture maxnew 2 generate --model "$MODELS/tiny-mha" --prompt hi -n 0
expect_failure maxnew "max_new_tokens must be >= 1"
run_capture toolong 2 generate --model "$MODELS/tiny-mha" --prompt hi -n 100000
expect_failure toolong "exceeds max_position_embeddings"
run_capture badtok 2 generate --model "$MODELS/tiny-mha" --prompt-tokens 1,99999
expect_failure badtok "token id 99999 is outside the vocabulary"
run_capture backend 2 generate --model "$MODELS/tiny-mha" --prompt hi --backend tpu
expect_failure backend "backend must be one of cpu, cuda, auto"
run_capture kvdtype 2 generate --model "$MODELS/tiny-mha" --prompt hi --kv-cache-dtype int8
expect_failure kvdtype "kv-cache-dtype must be one of auto, fp8, fp8_e4m3 (got \"int8\")"
run_capture kvfp8cpu 2 generate --model "$MODELS/tiny-mha" --prompt hi --backend cpu --kv-cache-dtype fp8
expect_failure kvfp8cpu "kv-cache-dtype fp8 needs the cuda backend"
run_capture wdtype 2 generate --model "$MODELS/tiny-mha" --prompt hi --weight-dtype int3
expect_failure wdtype "weight-dtype must be one of auto, fp16, bf16, fp8, fp8_e4m3, int8, int4 (got \"int3\")"
run_capture wdtype4 2 generate --model "$MODELS/tiny-mha" --prompt hi --backend cpu --weight-dtype int4
expect_failure wdtype4 "--weight-dtype int4 needs the cuda backend"
run_capture wint8cpu 2 generate --model "$MODELS/tiny-mha" --prompt hi --backend cpu --weight-dtype int8
expect_failure wint8cpu "weight-dtype int8 needs the cuda backend"

# A stop string ends generation early, is not printed, and finish_reason says stop.
run_capture free 1 generate --model "$MODELS/tiny-mha" --quiet --json --prompt "The cat" -n 30 --temperature 0 --ignore-eos
stop=$(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["text"]; print(t[4:7])' "$TMP/free.out")
run_capture stopped 1 generate --model "$MODELS/tiny-mha" --quiet --json --prompt "The cat" -n 30 --temperature 0 --ignore-eos --stop "$stop"
python3 - "$TMP/free.out" "$TMP/stopped.out" "$stop" <<'PY' && pass "stop string '$stop' truncates output" || fail "stop string handling"
import json, sys
free = json.load(open(sys.argv[1]))["text"]; got = json.load(open(sys.argv[2])); stop = sys.argv[3]
want = free[:free.index(stop)]
ok = got["finish_reason"] == "stop" and got["text"] == want
print("free:", repr(free), "stopped:", repr(got["text"]), got["finish_reason"])
sys.exit(0 if ok else 1)
PY
finish
