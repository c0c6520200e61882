#!/usr/bin/env bash
# Checks that every C++/CUDA file in src/, kernels/, tests/, benchmarks/ and java-bridge/native/
# is formatted as clang-format 14.0.6 formats it with the project's .clang-format (CI runs this).
# The formatter is PyPI's clang-format 14.0.6 in the project's .venv/ (launch/install-deps.sh --test
# makes it), so the check does not depend on one distribution's clang packages; CLANG_FORMAT=TOOL
# names another. Changes nothing; --fix reformats the files in place instead.
#   usage: launch/check-format.sh [--fix]
set -euo pipefail
cd "$(dirname "$0")/.."
tool=${CLANG_FORMAT:-.venv/bin/clang-format}
if ! command -v "$tool" >/dev/null; then
  echo "check-format: $tool not found (launch/install-deps.sh --test installs it into .venv/)" >&2
  exit 2
fi
if ! "$tool" --version | grep -q 'version 14\.0\.6'; then
  echo "check-format: $tool is $("$tool" --version), not clang-format 14.0.6; other releases format differently" >&2
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
