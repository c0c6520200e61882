#!/usr/bin/env bash
# The demo prints readable English: launch/demo.sh (its set-up skipped) under mpirun -np 2 on the
# CPU backend, and at least 80% of the words it prints are in Debian's wamerican list
# (/usr/share/dict/american-english). Words are runs of letters (an inner apostrophe allowed);
# one is in the list as written, lower-cased, or without a trailing "'s".
#   usage: demo_words.sh LLAMA2_BINARY
set -u
llama2=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
dict=/usr/share/dict/american-english
if [[ ! -f $dict ]]; then
  echo "FAIL: $dict is missing (launch/install-deps.sh installs wamerican)"; exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
DEMO_SKIP_SETUP=1 LLAMA2_BUILD=$(dirname "$llama2") timeout --kill-after=10 240 \
  bash "$root/launch/demo.sh" >"$tmp/out" 2>"$tmp/err"
rc=$?
if [[ $rc -ne 0 ]]; then
  echo "FAIL: demo exited $rc"; cat "$tmp/out" "$tmp/err"; exit 1
fi
# stdout: the "+ mpirun ..." line, then the generated text.
tail -n +2 "$tmp/out" > "$tmp/text"
python3 - "$tmp/text" "$dict" <<'PY'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
words = set(w.strip() for w in open(sys.argv[2], encoding="utf-8"))
found = re.findall(r"[A-Za-z]+(?:'[A-Za-z]+)*", text)
def known(w):
    return w in words or w.lower() in words or (w.endswith("'s") and w[:-2] in words)
hits = sum(known(w) for w in found)
share = hits / len(found) if found else 0.0
print(f"demo text: {text.strip()!r}")
print(f"{hits}/{len(found)} words in wamerican ({share:.0%}); unknown: {sorted(set(w for w in found if not known(w)))}")
ok = len(found) >= 20 and share >= 0.8
print("1 passed, 0 failed" if ok else "0 passed, 1 failed")
sys.exit(0 if ok else 1)
PY
