#!/usr/bin/env bash
# clang-tidy 14 with the project's .clang-tidy over the C++ sources of $LLAMA2_BUILD's
# compile_commands.json (configure it first, e.g. with launch/test.sh). Not part of CI: about 6
# CPU-minutes on the 2-core dev machine. cpu_ops.cpp is left out (GCC vector builtins that clang
# cannot parse); CUDA files are not covered. Needs: apt-get install clang-tidy-14.
#   usage: launch/tidy.sh [extra run-clang-tidy args]
set -euo pipefail
source "$(dirname "$0")/env.sh"
run-clang-tidy-14 -p "$LLAMA2_BUILD" -j "$(nproc)" -quiet "$@" \
  "$LLAMA2_ROOT/(src|tests|benchmarks|java-bridge)/(?!rank/cpu_ops).*\.cpp$"
