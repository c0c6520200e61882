#!/usr/bin/env bash
# Installs what llama2 builds and tests with, by capability: each need is a probe (a command on the
# PATH, a file, a pkg-config module, a Python module) and the Debian/Ubuntu package that provides
# it. A need already met, however it was installed (a JDK or Node.js from a vendor, a compiler built
# by hand), is not touched, and apt is not consulted when nothing is missing.
# Tried on Debian 12 and Debian 13; written for Ubuntu 24.04 too (the same package names).
#   usage: launch/install-deps.sh [--java|--test]
#     --java: also the JDK, JNA and JUnit 5;
#     --test: --java and the test tools (clang 19 with libFuzzer for the fuzz test and the clang
#             -Werror build, Maven for the offline Maven build, curl) and the project's Python
#             virtual environment .venv/ with launch/requirements-test.txt (the official openai
#             client, pytest, SentencePiece, clang-format 14.0.6, all pinned, from PyPI).
# A need that cannot be met stops the build when the build needs it. A test tool that cannot be
# installed is reported with the tests that will skip without it; under CI=true it fails the run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"

mode=${1:-}
case "$mode" in
  "" | --java | --test) ;;
  *)
    echo "install-deps: unknown option '$mode' (allowed: --java, --test)" >&2
    exit 2
    ;;
esac

# need KIND PROBE PACKAGE [WHAT IT SKIPS]: KIND is build (the build fails without it) or test (the
# named tests skip without it). PROBE: cmd:NAME, file:PATH, pc:MODULE (pkg-config), py:MODULE
# (the system python3), fuzz:CXX (CXX links a libFuzzer target with ASan and UBSan).
needs=()
need() { needs+=("$1|$2|$3|${4:-}"); }
need build cmd:cmake cmake
need build cmd:ninja ninja-build
need build cmd:pkg-config pkg-config
need build cmd:g++ g++
need build cmd:make make
need build cmd:mpicxx libopenmpi-dev
need build cmd:mpirun openmpi-bin
need build pc:sentencepiece libsentencepiece-dev
need build file:/usr/include/nlohmann/json.hpp nlohmann-json3-dev
need build file:/usr/include/cxxopts.hpp libcxxopts-dev
need build file:/usr/include/doctest/doctest.h doctest-dev
need build cmd:python3 python3 # test helpers (model-file corruption, JSON checks)
need test file:/usr/include/httplib.h libcpp-httplib-dev "serve --http and the http.* tests"
need test file:/usr/share/dict/american-english wamerican "demo.words (the demo's readability check)"
# benchmarks/http/fetch_httplib.sh unpacks and patches the cpp-httplib source package.
need test cmd:xz xz-utils "the poll()-based single-header cpp-httplib (.httplib/)"
need test cmd:patch patch "the poll()-based single-header cpp-httplib (.httplib/)"
if [[ $mode == --java || $mode == --test ]]; then
  need test cmd:javac default-jdk-headless "the Java bridge and the java.* tests"
  need test file:/usr/share/java/jna.jar libjna-java "the Java bridge and the java.* tests"
  need test file:/usr/share/java/junit-platform-console-standalone.jar junit5 "the java.* tests"
fi
if [[ $mode == --test ]]; then
  need test cmd:clang++-19 clang-19 "fuzz.requests and the clang -Werror build (launch/clang-check.sh)"
  need test fuzz:clang++-19 libclang-rt-19-dev "fuzz.requests"
  need test cmd:mvn maven "java.maven_offline"
  need test file:/usr/share/maven-repo/org/apache/maven/plugins/maven-compiler-plugin \
    libmaven-compiler-plugin-java "java.maven_offline"
  need test file:/usr/share/maven-repo/org/apache/maven/plugins/maven-jar-plugin \
    libmaven-jar-plugin-java "java.maven_offline"
  need test file:/usr/share/maven-repo/org/apache/maven/plugins/maven-resources-plugin \
    libmaven-resources-plugin-java "java.maven_offline"
  need test file:/usr/share/maven-repo/org/apache/maven/plugins/maven-install-plugin \
    libmaven-install-plugin-java "java.maven_offline"
  need test file:/usr/share/maven-repo/org/apache/maven/plugins/maven-surefire-plugin \
    libsurefire-java "java.maven_offline"
  need test cmd:curl curl "the http.* tests"
  # Debian's nginx (its package starts a service on port 80; the test runs its own as this user).
  need test cmd:nginx nginx "http.nginx_tls (TLS behind nginx)"
  need test cmd:openssl openssl "http.nginx_tls (its certificate is made at test time)"
  need test py:venv python3-venv "every test that uses .venv/ (http.openai_client, chat.*, the format check)"
  need test py:ensurepip python3-venv "every test that uses .venv/ (http.openai_client, chat.*, the format check)"
fi

met() {
  local probe=$1
  case "$probe" in
    cmd:*) command -v "${probe#cmd:}" >/dev/null ;;
    file:*) [[ -e ${probe#file:} ]] ;;
    pc:*) pkg-config --exists "${probe#pc:}" 2>/dev/null ;;
    py:*) python3 -c "import ${probe#py:}" 2>/dev/null ;;
    fuzz:*) fuzz_links "${probe#fuzz:}" ;;
  esac
}

fuzz_links() {
  command -v "$1" >/dev/null || return 1
  local dir rc
  dir=$(mktemp -d)
  printf '%s\n' '#include <cstddef>' '#include <cstdint>' \
    'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }' >"$dir/p.cpp"
  "$1" -fsanitize=fuzzer,address,undefined "$dir/p.cpp" -o "$dir/p" >/dev/null 2>&1
  rc=$?
  rm -rf "$dir"
  return "$rc"
}

# unmet [KIND]: the needs (of KIND, or all) not met now, one per line.
unmet() {
  local n kind probe
  for n in "${needs[@]}"; do
    IFS='|' read -r kind probe _ _ <<<"$n"
    [[ -n ${1:-} && $kind != "$1" ]] && continue
    met "$probe" || echo "$n"
  done
}

install_packages() {
  local pkgs=("$@")
  if ! command -v apt-get >/dev/null; then
    echo "install-deps: no apt-get here; install the packages named above (or what provides them) by hand" >&2
    return 1
  fi
  local sudo=()
  [[ $(id -u) -ne 0 ]] && sudo=(sudo)
  echo "install-deps: installing ${pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  local log rc=0
  log=$(mktemp)
  { "${sudo[@]}" apt-get update -qq &&
      "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${pkgs[@]}"; } >"$log" 2>&1 || rc=$?
  [[ $rc -ne 0 ]] && cat "$log" >&2
  rm -f "$log"
  return "$rc"
}

# report LINES: one line per unmet need, with what it costs.
report() {
  local kind probe pkg skips
  while IFS='|' read -r kind probe pkg skips; do
    [[ -z $kind ]] && continue
    if [[ $kind == build ]]; then
      echo "install-deps: MISSING ${probe#*:} (package $pkg): the build needs it" >&2
    else
      echo "install-deps: MISSING ${probe#*:} (package $pkg): skipped without it: $skips" >&2
    fi
  done <<<"$1"
}

missing=$(unmet)
if [[ -z $missing ]]; then
  echo "install-deps: all ${#needs[@]} needs met"
else
  mapfile -t pkgs < <(cut -d'|' -f3 <<<"$missing" | sort -u)
  install_packages "${pkgs[@]}" || echo "install-deps: the package install failed" >&2
fi

# Debian 13's sentencepiece.pc requires protobuf-lite.pc (privately), which its -dev package does
# not pull in: without it pkg-config, and so CMake, does not find SentencePiece.
if ! met pc:sentencepiece &&
  [[ $(pkg-config --print-errors --exists sentencepiece 2>&1) == *protobuf-lite* ]]; then
  install_packages libprotobuf-dev || echo "install-deps: the package install failed" >&2
fi

status=0
if [[ -n $(unmet build) ]]; then
  report "$(unmet build)"
  status=1
fi
if [[ -n $(unmet test) ]]; then
  report "$(unmet test)"
  [[ ${CI:-} == true ]] && status=1
fi

# cpp-httplib's single header from the distribution's own source package of the installed
# libcpp-httplib-dev (into the git-ignored .httplib/, which CMake prefers): compiled in, it waits
# with poll() and serves more than ~1,000 connections; the distribution's prebuilt .so uses
# select(). Without it the build uses the .so.
if [[ ! -f $root/.httplib/httplib.h ]] && met file:/usr/include/httplib.h; then
  bash "$root/benchmarks/http/fetch_httplib.sh" "$root/.httplib" ||
    echo "install-deps: WARNING: no cpp-httplib source package; the HTTP front uses the distribution's .so (select(): connections past ~1,000 descriptors fail)" >&2
fi

# The project's Python virtual environment for the tests, re-made when the pinned list changes.
if [[ $mode == --test ]] && met py:venv && met py:ensurepip; then
  bash "$root/launch/make-venv.sh" || { [[ ${CI:-} == true ]] && status=1; }
fi
exit "$status"
