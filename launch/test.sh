#!/usr/bin/env bash
# Fresh machine to a full test run: install packages, build, run every ctest test (unit tests,
# HF reference fixtures at 1/2/4 ranks, CLI behaviour under mpirun). GPU tests skip without a GPU.
#   usage: launch/test.sh [extra ctest args]
set -euo pipefail
source "$(dirname "$0")/env.sh"
"$LLAMA2_ROOT/launch/install-deps.sh" --test
llama2_build
cd "$LLAMA2_BUILD"
ctest --output-on-failure -j "$(nproc)" "$@"
