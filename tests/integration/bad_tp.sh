#!/usr/bin/env bash
# A tensor-parallel degree that does not fit the heads stops every rank with the valid degrees.
source "$(dirname "$0")/lib.sh" "$@"
run_capture tp3 3 generate --model "$MODELS/tiny-mha" --prompt hi -n 2
expect_failure tp3 "Valid tensor-parallel degrees for this model: 1, 2, 4"
# tiny-gqa: 8 heads, 2 KV heads -> 1, 2, 4, 8 (KV heads replicated beyond 2).
run_capture tp3g 3 generate --model "$MODELS/tiny-gqa" --prompt hi -n 2
expect_failure tp3g "Valid tensor-parallel degrees for this model: 1, 2, 4, 8"
finish
