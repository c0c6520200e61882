#!/usr/bin/env bash
# ctest constrain.validity: 200 generated schemas, outputs sampled under the constraint engine's
# mask on the tokenizers of tests/models/tiny-gqa and models/docs-8m, validated by PyPI's
# jsonschema (tests/reference/constrain_validity.py). Skips (77) without the project's .venv/,
# fails under CI=true.
#   usage: constrain_validity.sh SAMPLER
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../test_python.sh
source "$root/tests/test_python.sh"
test_python constrain.validity jsonschema
"$PY" "$root/tests/reference/constrain_validity.py" "$1" \
  "$root/tests/models/tiny-gqa/tokenizer.model" "$root/models/docs-8m/tokenizer.model"
