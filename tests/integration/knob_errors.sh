#!/usr/bin/env bash
# The LLAMA2_* tuning knobs (docs/performance.md, "Environment knobs") are read once at start-up: a value
# outside the documented ones stops the job on every rank with one message naming the variable
# and its allowed values, on any backend (before issue 15 most were read only by the CUDA backend,
# and "yes", "off" or "16" were silently taken as on, on or 8).
source "$(dirname "$0")/lib.sh" "$@"

bad() {  # bad NAME VAR=VALUE PATTERN: a 2-rank cpu generate with VAR=VALUE fails with PATTERN
  local name=$1 assignment=$2 pattern=$3
  env "$assignment" "$MPIRUN" 2 "$LLAMA2" generate --model "$MODELS/tiny-mha" --prompt hi \
    --backend cpu -n 2 --quiet >"$TMP/$name.out" 2>"$TMP/$name.err"
  echo $? >"$TMP/$name.rc"
  echo 0 >"$TMP/$name.secs"
  expect_failure "$name" "$pattern"
}

bad full_logits LLAMA2_FULL_LOGITS=yes "LLAMA2_FULL_LOGITS=yes: expected 0 or 1"
bad pdl LLAMA2_PDL=off "LLAMA2_PDL=off: expected 0 or 1"
bad gemv LLAMA2_GEMV=16 "LLAMA2_GEMV=16: expected an integer from 0 (cuBLAS only) to 8"
bad warmup LLAMA2_WARMUP=no "LLAMA2_WARMUP=no: expected 0 or 1"
bad decode LLAMA2_DECODE_KERNEL=fast "LLAMA2_DECODE_KERNEL=fast: expected auto, block or warp"
bad prefill LLAMA2_PREFILL_KERNEL=fa2 "LLAMA2_PREFILL_KERNEL=fa2: expected auto, wmma or mma"

# The documented values run.
LLAMA2_FULL_LOGITS=1 LLAMA2_PDL=0 LLAMA2_GEMV=0 LLAMA2_WARMUP=0 LLAMA2_MIXED_DECODE=1 \
  run_capture good 2 generate --model "$MODELS/tiny-mha" --prompt hi --backend cpu -n 2 --quiet
[[ $(rc_of good) -eq 0 ]] && pass "documented values run" ||
  { fail "documented values: exit $(rc_of good)"; sed 's/^/    /' "$TMP/good.err"; }
finish
