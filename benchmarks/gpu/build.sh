#!/usr/bin/env bash
# Configures and builds the project on a GPU node (Release, -DLLAMA2_WERROR=ON, sm_90, ninja) into
# build-gpu/, the build every script under benchmarks/ runs. CMake takes cpp-httplib's single
# header from .httplib/ when it is there (carried to the node; benchmarks/README.md).
# Usage: bash benchmarks/gpu/build.sh [targets...]   (default: everything)
# (Before: tests/gpu/node_build.sh.)
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA2_WERROR=ON >/dev/null
# ninja's own status (with pipefail, `ninja | grep || true` read PIPESTATUS of `true`: a failed
# build passed).
set +e
ninja -C build-gpu "$@" 2>&1 | grep -vE "^\[[0-9]+/[0-9]+\] "
exit "${PIPESTATUS[0]}"
