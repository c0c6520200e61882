#!/usr/bin/env bash
# Configures and builds the project on a GPU node (Release, sm_90, ninja) into build-gpu/.
# Usage: bash tests/gpu/node_build.sh [targets...]   (default: everything)
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA2_WERROR=ON >/dev/null
# ninja's own status (with pipefail, `ninja | grep || true` read PIPESTATUS of `true`: a failed
# build passed).
set +e
ninja -C build-gpu "$@" 2>&1 | grep -vE "^\[[0-9]+/[0-9]+\] "
exit "${PIPESTATUS[0]}"
