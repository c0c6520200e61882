#!/usr/bin/env bash
# Checks that every C++/CUDA file in src/, kernels/, tests/, benchmarks/ and java-bridge/native/
# is formatted as clang-format 14 formats it with the project's .clang-format (CI runs this).
# Changes nothing; --fix reformats the files in place instead.
#   usage: launch/check-format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
tool=${CLANG_FORMAT:-clang-format-14}
if ! command -v "$tool" >/dev/null; then
  echo "check-format: $tool not found (launch/install-deps.sh --test installs it)" >&2
  exit 2
fi
mapfile -d '' files < <(find src kernels tests benchmarks java-bridge/native -type f \
  \( -name '*.h' -o -name '*.hpp' -o -name '*.c' -o -name '*.cc' -o -name '*.cpp' \
     -o -name '*.cu' -o -name '*.cuh' \) -print0 | sort -z)
if [[ "${1:-}" == "--fix" ]]; then
  "$tool" -i "${files[@]}"
  echo "check-format: ${#files[@]} files formatted"
  exit 0
fi
if ! "$tool" --dry-run -Werror "${files[@]}"; then
  echo "check-format: the files above differ from $tool's format; fix: bash launch/check-format.sh --fix" >&2
  exit 1
fi
echo "check-format: ${#files[@]} files formatted as $tool formats them"
