#!/usr/bin/env bash
# ctest constrain.serve.MODEL: constrained requests through a real `serve` at 1, 2 and 4 CPU ranks
# (tests/reference/constrain_serve.py): outputs validated by PyPI's jsonschema, TP 1/2/4 equal
# token for token. Skips (77) without the project's .venv/, fails under CI=true.
#   usage: constrain_serve.sh LLAMA2 MODEL_DIR
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../test_python.sh
source "$root/tests/test_python.sh"
test_python constrain.serve jsonschema
mpirun=${LLAMA2_MPIRUN:-$root/tests/integration/mpirun.sh}
"$PY" "$root/tests/reference/constrain_serve.py" "$1" "$mpirun" "$2" 1 2 4
