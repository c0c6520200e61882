#!/usr/bin/env bash
# Compiles the whole tree with clang 19 and -Werror, the host code of the CUDA units included
# (nvcc -ccbin clang++-19), into a build dir of its own ($LLAMA2_CLANG_BUILD, default build-clang/).
# CI runs it beside the g++ build of launch/test.sh, so the code stays warning-free on both
# compilers. Nothing is run: the tests run on the g++ build.
#   usage: launch/clang-check.sh [ninja targets]
set -euo pipefail
source "$(dirname "$0")/env.sh"
cxx=${LLAMA2_CLANG_CXX:-clang++-19}
cc=${LLAMA2_CLANG_CC:-clang-19}
if ! command -v "$cxx" >/dev/null; then
  echo "clang-check: $cxx not found (launch/install-deps.sh --test installs clang-19)" >&2
  exit 2
fi
LLAMA2_BUILD=${LLAMA2_CLANG_BUILD:-$LLAMA2_ROOT/build-clang}
# nvcc's host compiler through CUDAHOSTCXX: CMake's check_language(CUDA) probe and the CUDA
# language both read it (a -DCMAKE_CUDA_HOST_COMPILER given here was left unused).
export CUDAHOSTCXX=$cxx
# The CUDA units go to PTX only (90-virtual): the host code and the front end see everything, and
# ptxas, half of a CUDA unit's compile and no source warning of ours, is skipped.
llama2_configure -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" -DLLAMA2_WERROR=ON \
  -DCMAKE_CUDA_ARCHITECTURES=90-virtual
if [[ -f $LLAMA2_BUILD/CMakeCache.txt ]] && grep -q '^CMAKE_CUDA_COMPILER:.*nvcc' "$LLAMA2_BUILD/CMakeCache.txt" &&
  ! grep -rqs -- "-ccbin=.*$cxx" "$LLAMA2_BUILD/CMakeFiles/rules.ninja"; then
  echo "clang-check: $LLAMA2_BUILD compiles CUDA host code with another compiler; remove it and rerun" >&2
  exit 2
fi
cmake --build "$LLAMA2_BUILD" -j "$(nproc)" ${1:+--target "$@"}
echo "clang-check: $("$cxx" --version | head -1): no warning"
