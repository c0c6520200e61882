#!/usr/bin/env bash
# Puts cpp-httplib's single-file header into DIR (default .httplib/, git-ignored): the source
# package of the libcpp-httplib-dev installed here (launch/install-deps.sh installs it), at exactly
# its version, with the distribution's patches applied. The distribution's binary package ships a
# declarations-only header plus libcpp-httplib.so (built with select(), which fails past ~1,000
# descriptors) and cannot be carried alone; the single header compiles header-only with poll().
# CMake prefers .httplib/; carry DIR to the GPU node, which has no package, and configure there
# with -DLLAMA2_HTTPLIB_DIR=DIR (benchmarks/http/gpu_http_vs_socket.sh does).
#
# Where the source comes from: the same archives and suites that this machine's apt already uses
# for binary packages (apt-get indextargets), as deb-src entries in a private list and a private
# state folder, so no host or release is written here and no system configuration is touched. The
# version is pinned per distribution by the installed binary package.
#   usage: bash benchmarks/http/fetch_httplib.sh [DIR]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${1:-$ROOT/.httplib}
read -r src_pkg version < <(dpkg-query -W -f '${source:Package} ${source:Version}\n' libcpp-httplib-dev 2>/dev/null) || {
  echo "fetch_httplib: libcpp-httplib-dev is not installed (launch/install-deps.sh installs it)" >&2
  exit 1
}
work=$(mktemp -d)
# apt downloads as its own user (_apt) where that user may write.
chmod 755 "$work"
if [[ $(id -u) -eq 0 ]] && id _apt >/dev/null 2>&1; then chown _apt "$work"; fi
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial"
# One deb-src line per archive and suite, with every component apt indexes there.
apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 'Created-By: Packages' |
  awk '$2 != "/" { key = $1 " " $2; if (!(key in comps)) order[n++] = key;
                   if (index(" " comps[key] " ", " " $3 " ") == 0) comps[key] = comps[key] " " $3 }
       END { for (i = 0; i < n; i++) print "deb-src " order[i] comps[order[i]] }' >"$work/sources.list"
if [[ ! -s $work/sources.list ]]; then
  echo "fetch_httplib: apt indexes no archive here to take the source from" >&2
  exit 1
fi
apt_opts=(-o "Dir::Etc::SourceList=$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$work/lists")
apt-get "${apt_opts[@]}" update -qq
(cd "$work" && apt-get "${apt_opts[@]}" source --download-only "$src_pkg=$version" -qq)
orig=$(cd "$work" && ls "${src_pkg}"_*.orig.tar.*)
dir=$(cd "$work" && tar tf "$orig" | awk -F/ 'NR == 1 { print $1 }')
(cd "$work" && tar xf "$orig" && mkdir -p "$dir" && tar xf "${src_pkg}"_*.debian.tar.* -C "$dir")
if [[ -f $work/$dir/debian/patches/series ]]; then
  while read -r p; do
    [[ -z $p || $p == \#* ]] && continue
    patch -d "$work/$dir" -p1 -s <"$work/$dir/debian/patches/$p"
  done <"$work/$dir/debian/patches/series"
fi
mkdir -p "$DEST"
cp "$work/$dir/httplib.h" "$work/$dir/LICENSE" "$DEST/"
echo "fetch_httplib: $DEST/httplib.h from $src_pkg $version ($(grep -m1 CPPHTTPLIB_VERSION "$DEST/httplib.h"))"
