#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages llama2 builds and tests with. Idempotent: packages already
# present are not touched, and apt is not even consulted when nothing is missing.
#   usage: launch/install-deps.sh [--java|--test]
#     --java: also the JDK, JNA and JUnit 5;
#     --test: --java and the test tools (clang 14 with libFuzzer for the fuzz test, clang-format 14,
#             Python SentencePiece for the chat-format fixture check, Node.js + npm and the official
#             OpenAI Node client, `npm ci` into tests/http/node_modules from the committed lock)
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libopenmpi-dev openmpi-bin
  libsentencepiece-dev nlohmann-json3-dev libcxxopts-dev doctest-dev
  libcpp-httplib-dev  # serve --http (CMake builds without it, and --http is then refused)
  python3  # test helpers (model-file corruption, JSON checks)
  wamerican  # the English word list the demo's readability test checks against
)
case "${1:-}" in
  "") ;;
  --java) packages+=(default-jdk-headless libjna-java junit5) ;;
  --test) packages+=(default-jdk-headless libjna-java junit5 clang-14 libclang-rt-14-dev clang-format-14
            maven libmaven-compiler-plugin-java libmaven-jar-plugin-java libmaven-resources-plugin-java
            libmaven-install-plugin-java libsurefire-java
            python3-sentencepiece nodejs npm curl) ;;
  *)
    echo "install-deps: unknown option '$1' (allowed: --java, --test)" >&2
    exit 2
    ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# cpp-httplib's single header from Debian's source package of the same version (into the
# git-ignored .httplib/, which CMake prefers): compiled in, it waits with poll() and serves more than
# ~1,000 connections; Debian's prebuilt .so uses select(). Without it the build uses the .so.
root="$(cd "$(dirname "$0")/.." && pwd)"
if [[ ! -f $root/.httplib/httplib.h ]]; then
  bash "$root/benchmarks/http/fetch_httplib.sh" "$root/.httplib" 2>/dev/null ||
    echo "install-deps: WARNING: could not fetch cpp-httplib's source; the HTTP front uses Debian's .so (select(): connections past ~1,000 descriptors fail)" >&2
fi

# The OpenAI Node client for tests/http/ (npm registry), exactly the committed lock's versions,
# into the git-ignored tests/http/node_modules.
if [[ ${1:-} == --test ]]; then
  http_tests="$(cd "$(dirname "$0")/.." && pwd)/tests/http"
  if [[ ! -f $http_tests/node_modules/openai/package.json ]]; then
    echo "install-deps: npm ci in $http_tests"
    (cd "$http_tests" && npm ci --no-audit --no-fund --loglevel=error)
  fi
fi
