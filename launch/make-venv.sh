#!/usr/bin/env bash
# Makes the project's Python virtual environment .venv/ (git-ignored) at the repository root from
# launch/requirements-test.txt, with the python3 on the PATH. It is made again only when that list
# changed since (its hash is kept in .venv/requirements.sha256) or the environment is broken.
# launch/install-deps.sh --test calls this; the tests run .venv/bin/python.
#   usage: launch/make-venv.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv=$root/.venv
req=$root/launch/requirements-test.txt
want=$(sha256sum "$req" | cut -d' ' -f1)
if [[ -x $venv/bin/python && $(cat "$venv/requirements.sha256" 2>/dev/null) == "$want" ]] &&
  "$venv/bin/python" -c 'import openai, pytest, sentencepiece' 2>/dev/null; then
  echo "make-venv: $venv is up to date"
  exit 0
fi
echo "make-venv: making $venv from $req"
rm -rf "$venv"
python3 -m venv "$venv"
# --no-deps: the list names every package, the transitive ones too, so nothing unpinned comes in.
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$req"
if ! check=$("$venv/bin/python" -m pip check 2>&1); then
  echo "make-venv: the pinned list is not self-consistent (pip check):" >&2
  echo "$check" >&2
  exit 1
fi
echo "$want" >"$venv/requirements.sha256"
echo "make-venv: $venv ready ($("$venv/bin/python" --version))"
