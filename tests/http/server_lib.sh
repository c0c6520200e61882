# shellcheck shell=bash
# The HTTP tests' server, shared (sourced after tests/integration/lib.sh, which sets LLAMA2, MPIRUN,
# TMP, pass/fail/finish):
#   http_serve NAME [VAR=VALUE...] -- SERVE_ARGS...
#       starts `llama2 serve --socket $TMP/NAME.sock --http 127.0.0.1:0 SERVE_ARGS` on 2 ranks in the
#       background, in a process group of its own, the VARs in its environment, its output in
#       $TMP/NAME.log. The launcher is $HTTP_LAUNCHER (default $MPIRUN, tests/integration/mpirun.sh;
#       both put a time limit on the job, so a hang fails the test).
#   http_wait NAME PATTERN   waits (up to 60 s: a loaded 2-core machine) until NAME's log has
#                            PATTERN; 1 when it never came or the job ended first.
#   http_up NAME [VAR]       waits for the front's "HTTP on" line, sets VAR (default PORT) to its
#                            port, passes "NAME: HTTP front on port P"; otherwise fails, shows the
#                            log and ends the test.
#   http_rank0 NAME          prints rank 0's llama2 pid (a signal to it drains; one to mpirun would
#                            cut the ranks).
#   http_end NAME            the job must exit 0 within 30 s (after a drain a test asked for).
#   http_stop NAME           SIGTERM to rank 0, then http_end (rank 0 drains, every rank exits 0).
#   http_pytest LABEL SECONDS FILES...
#                            runs FILES under pytest on $PY (the .venv, tests/test_python.sh) with a
#                            time limit; passes or fails LABEL and lists each test's outcome.
# Every job still running when the script exits (a failure's early exit) is stopped then.
declare -A HTTP_JOB=()
PORT=""
HTTP_LAUNCHER=${HTTP_LAUNCHER:-$MPIRUN}
_HTTP_LLAMA2_REAL=$(readlink -f "$LLAMA2")

http_serve() {
  local name=$1 vars=()
  shift
  while [[ $1 != -- ]]; do vars+=("$1"); shift; done
  shift
  set -m  # its own process group: a non-interactive shell would start it with SIGINT ignored
  env "${vars[@]}" "$HTTP_LAUNCHER" 2 "$LLAMA2" serve --socket "$TMP/$name.sock" \
    --http 127.0.0.1:0 "$@" >"$TMP/$name.log" 2>&1 &
  HTTP_JOB[$name]=$!
  set +m
}

http_wait() {
  local name=$1 pattern=$2 i
  for ((i = 0; i < 600; i++)); do
    grep -q -- "$pattern" "$TMP/$name.log" && return 0
    kill -0 "${HTTP_JOB[$name]}" 2>/dev/null || break
    sleep 0.1
  done
  grep -q -- "$pattern" "$TMP/$name.log"
}

http_up() {
  local name=$1 port
  http_wait "$name" "HTTP on" || true
  port=$(sed -n 's/.*HTTP on 127.0.0.1:\([0-9]*\).*/\1/p' "$TMP/$name.log" | head -n1)
  if [[ -z $port ]]; then
    fail "$name: the server did not report its HTTP port"
    cat "$TMP/$name.log"
    finish
    exit
  fi
  printf -v "${2:-PORT}" '%s' "$port"
  pass "$name: HTTP front on port $port"
}

http_rank0() {
  local p
  for p in $(pgrep -f -- "--socket $TMP/$1.sock"); do
    [[ "$(readlink -f "/proc/$p/exe" 2>/dev/null)" == "$_HTTP_LLAMA2_REAL" ]] || continue
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=0 && { echo "$p"; return 0; }
  done
  return 1
}

http_stop() {
  local r0
  if r0=$(http_rank0 "$1"); then kill -TERM "$r0"; else fail "$1: rank 0 not found"; fi
  http_end "$1"
}

http_end() {
  local name=$1 job=${HTTP_JOB[$1]} i rc
  for ((i = 0; i < 300; i++)); do kill -0 "$job" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$job" 2>/dev/null; then
    fail "$name: the server did not exit within 30 s of its drain"
    tail -20 "$TMP/$name.log"
    kill -TERM "$job" 2>/dev/null
    wait "$job" 2>/dev/null
  else
    wait "$job"
    rc=$?
    if [[ $rc -eq 0 ]]; then pass "$name: server drained and exited 0"
    else fail "$name: server exit $rc"; tail -20 "$TMP/$name.log"; fi
  fi
  unset "HTTP_JOB[$name]"
}

http_pytest() {
  local label=$1 secs=$2
  shift 2
  # -v lists each test's outcome; no cache directory or bytecode is written into the source tree.
  if timeout "$secs" env PYTHONDONTWRITEBYTECODE=1 "$PY" -m pytest -v -p no:cacheprovider "$@" \
    >"$TMP/pytest.out" 2>&1; then
    pass "$label: $(tail -n1 "$TMP/pytest.out" | sed 's/^=* *//; s/ *=*$//')"
  else
    fail "$label:"
    cat "$TMP/pytest.out"
  fi
  grep -E '::test_[a-z0-9_]+ (PASSED|FAILED|ERROR|SKIPPED)' "$TMP/pytest.out" |
    sed 's/ *\[ *[0-9]*%\]$//; s/^.*:://; s/^/    /'
}

_http_cleanup() {
  local name
  for name in "${!HTTP_JOB[@]}"; do kill -TERM "${HTTP_JOB[$name]}" 2>/dev/null; done
  for name in "${!HTTP_JOB[@]}"; do wait "${HTTP_JOB[$name]}" 2>/dev/null; done
  rm -rf "$TMP"
}
trap _http_cleanup EXIT
