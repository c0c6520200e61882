# Shared helpers for the CLI integration tests (sourced). Each script gets $1 = llama2 binary,
# $2 = the committed test models directory.
set -u
LLAMA2=$1
MODELS=$2
MPIRUN=${LLAMA2_MPIRUN:-$(dirname "${BASH_SOURCE[0]}")/mpirun.sh}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILURES=0
PASSES=0

pass() { PASSES=$((PASSES + 1)); echo "ok: $*"; }
fail() { FAILURES=$((FAILURES + 1)); echo "FAIL: $*"; }

# run_capture NAME NP ARGS... : runs llama2 under mpirun, stdout/stderr to $TMP/NAME.{out,err},
# exit code to $TMP/NAME.rc, elapsed seconds to $TMP/NAME.secs.
run_capture() {
  local name=$1 np=$2; shift 2
  local t0=$SECONDS
  "$MPIRUN" "$np" "$LLAMA2" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
  echo $? >"$TMP/$name.rc"
  echo $((SECONDS - t0)) >"$TMP/$name.secs"
}
rc_of() { cat "$TMP/$1.rc"; }

# expect_failure NAME PATTERN: non-zero exit (not a timeout), PATTERN on stderr exactly once
# (one clear message, not one per rank).
expect_failure() {
  local name=$1 pattern=$2 rc count
  rc=$(rc_of "$name")
  count=$(grep -c -- "$pattern" "$TMP/$name.err")
  if [[ $rc -eq 0 ]]; then fail "$name: exit code 0, expected failure"; return; fi
  if [[ $rc -eq 124 || $rc -eq 137 ]]; then fail "$name: timed out (hang)"; return; fi
  if [[ $count -ne 1 ]]; then
    fail "$name: expected '$pattern' once on stderr, found $count times:"; sed 's/^/    /' "$TMP/$name.err"
    return
  fi
  pass "$name: exit $rc in $(cat "$TMP/$name.secs")s: $(grep -m1 -- "$pattern" "$TMP/$name.err")"
}

finish() {
  echo "$PASSES passed, $FAILURES failed"
  [[ $FAILURES -eq 0 ]]
}
