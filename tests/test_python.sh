# shellcheck shell=bash
# Sourced by the tests that run Python: `test_python TEST MODULE...` sets PY to the project's
# virtual-environment interpreter (.venv/bin/python, made by launch/install-deps.sh --test;
# LLAMA2_PYTHON names another) once it imports every MODULE. Otherwise it says what is missing and
# ends the test: skipped (exit 77, which ctest reports as skipped) on a developer's machine, failed
# (exit 1) under CI=true, where every test dependency must be there.
test_python() {
  local test=$1 root
  shift
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  PY=${LLAMA2_PYTHON:-$root/.venv/bin/python}
  local missing=""
  if [[ ! -x $PY ]]; then
    missing="the interpreter $PY"
  elif ! (IFS=,; "$PY" -c "import $*") 2>/dev/null; then
    missing="Python modules among '$*' in $PY"
  fi
  [[ -z $missing ]] && return 0
  if [[ ${CI:-} == true ]]; then
    echo "FAIL: $test: $missing is missing (bash launch/install-deps.sh --test makes .venv/)" >&2
    exit 1
  fi
  echo "SKIP: $test: $missing is missing; run bash launch/install-deps.sh --test to make .venv/" >&2
  exit 77
}
