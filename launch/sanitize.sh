#!/usr/bin/env bash
# The unit tests once more under AddressSanitizer + UndefinedBehaviorSanitizer, in a CPU-only build
# dir of their own ($LLAMA2_SANITIZE_BUILD, default build-sanitize/) that builds only
# llama2_unit_tests. A sanitizer report (leaks included) fails the run. CI runs it after
# launch/test.sh.
#   usage: launch/sanitize.sh [doctest args, e.g. -ts=scheduler]
# Debug (-O0) because ASan makes -O2 compiles ~4x slower (60 s vs 16 s for cli_serve.cpp); the CPU
# operators keep their own -O3, so the tests still run in seconds.
set -euo pipefail
source "$(dirname "$0")/env.sh"
LLAMA2_BUILD=${LLAMA2_SANITIZE_BUILD:-$LLAMA2_ROOT/build-sanitize}
llama2_configure -DCMAKE_BUILD_TYPE=Debug -DLLAMA2_CUDA=OFF -DLLAMA2_SANITIZE=ON
cmake --build "$LLAMA2_BUILD" -j "$(nproc)" --target llama2_unit_tests
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
"$LLAMA2_BUILD/tests/llama2_unit_tests" --force-colors=0 "$@"
