#!/usr/bin/env bash
# launch/env.sh reconfigures a build dir when an optional part that its last configure looked for
# and did not find (CMake's LLAMA2_OPTIONAL_MISSING: a JDK, JNA, JUnit, nvcc) exists now, so that a
# build configured before `install-deps.sh --java` still registers every test.
#   usage: test_reconfigure.sh [BUILD_DIR]
# With BUILD_DIR (ctest passes its own): also fails when that build was configured without a part
# that is installed now, i.e. when some of its tests are silently not registered.
set -euo pipefail
source "$(dirname "$0")/../../launch/env.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# llama2_appeared_parts: which recorded-missing entries exist now.
mkdir -p "$tmp/bin" "$tmp/build"
cache="$tmp/build/CMakeCache.txt"
printf 'CMAKE_BUILD_TYPE:STRING=RelWithDebInfo\nLLAMA2_OPTIONAL_MISSING:INTERNAL=%s\n' \
  "program:llama2-test-javac;file:$tmp/jna.jar" >"$cache"
export PATH="$tmp/bin:$PATH"
got=$(llama2_appeared_parts "$cache")
[[ -z "$got" ]] || fail "nothing has appeared yet, got '$got'"
touch "$tmp/jna.jar"
got=$(llama2_appeared_parts "$cache")
[[ "$got" == "$tmp/jna.jar" ]] || fail "jna.jar appeared, got '$got'"
printf '#!/bin/sh\n' >"$tmp/bin/llama2-test-javac"
chmod +x "$tmp/bin/llama2-test-javac"
got=$(llama2_appeared_parts "$cache")
[[ "$got" == "llama2-test-javac;$tmp/jna.jar" ]] || fail "both appeared, got '$got'"
got=$(llama2_appeared_parts "$tmp/no-such-cache")
[[ -z "$got" ]] || fail "no cache: nothing to report, got '$got'"

# llama2_configure: runs cmake again exactly when something appeared (a fake cmake records calls).
printf '#!/bin/sh\necho "$*" >> %s/cmake.calls\n' "$tmp" >"$tmp/bin/cmake"
chmod +x "$tmp/bin/cmake"
touch "$tmp/build/build.ninja"
LLAMA2_BUILD="$tmp/build" llama2_configure >/dev/null
[[ "$(cat "$tmp/cmake.calls")" == "-S $LLAMA2_ROOT -B $tmp/build" ]] || fail "no reconfigure"
rm "$tmp/cmake.calls"
printf 'LLAMA2_OPTIONAL_MISSING:INTERNAL=file:%s/still-missing.jar\n' "$tmp" >"$cache"
LLAMA2_BUILD="$tmp/build" llama2_configure >/dev/null
[[ ! -e "$tmp/cmake.calls" ]] || fail "reconfigured although nothing appeared"
echo "ok: reconfigure rule"

if [[ $# -ge 1 ]]; then
  got=$(llama2_appeared_parts "$1/CMakeCache.txt")
  [[ -z "$got" ]] || fail "$1 was configured before '$got' was installed: tests are missing" \
    "(launch/test.sh reconfigures; or run cmake -S . -B $1)"
  echo "ok: $1 was configured with every optional part installed now"
fi
