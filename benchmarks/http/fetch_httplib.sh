#!/usr/bin/env bash
# Puts cpp-httplib's single-file header (Debian's source package of the libcpp-httplib-dev that
# launch/install-deps.sh installs, with Debian's patches applied) into DIR (default .httplib/,
# git-ignored), for a machine without the package: the GPU node. Debian's binary package ships a
# declarations-only header plus libcpp-httplib.so, which cannot be carried alone; the upstream
# single header compiles header-only. Run it on the development machine (it uses apt's Debian
# source index through a private list, touching no system configuration), then carry DIR and
# configure with -DLLAMA2_HTTPLIB_DIR=DIR (benchmarks/http/gpu_http_vs_socket.sh does).
#   usage: bash benchmarks/http/fetch_httplib.sh [DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${1:-$ROOT/.httplib}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial"
echo "deb-src http://deb.debian.org/debian bookworm main" >"$work/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$work/lists")
apt-get "${apt_opts[@]}" update -qq
(cd "$work" && apt-get "${apt_opts[@]}" source --download-only cpp-httplib=0.11.4+ds-1+deb12u1 -qq)
src=$(cd "$work" && tar tf cpp-httplib_*.orig.tar.* | awk -F/ 'NR == 1 { print $1 }')
(cd "$work" && tar xf cpp-httplib_*.orig.tar.* && mkdir -p "$src" && tar xf cpp-httplib_*.debian.tar.* -C "$src")
while read -r p; do
  [[ -z $p || $p == \#* ]] && continue
  patch -d "$work/$src" -p1 -s <"$work/$src/debian/patches/$p"
done <"$work/$src/debian/patches/series"
mkdir -p "$DEST"
cp "$work/$src/httplib.h" "$work/$src/LICENSE" "$DEST/"
echo "fetch_httplib: $DEST/httplib.h ($(grep -m1 CPPHTTPLIB_VERSION "$DEST/httplib.h"))"
