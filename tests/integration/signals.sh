#!/usr/bin/env bash
# Signals through launch/llama2-mpirun (issue 14, item 5), with a real `serve` job of 2 ranks on the
# CPU backend and a real `llama2 client` stream in flight:
#   sigint   SIGINT to the wrapper (a terminal's Ctrl-C reaches only the wrapper's process group)
#   mixed    systemd's KillMode=mixed: SIGTERM to the main process (the wrapper) only, SIGKILL to
#            whatever is left after TimeoutStopSec (that of launch/systemd/llama2.service) --
#            the wrapper must be done by then and nothing may be left
#   all      SIGTERM to every process of the job at once (systemd KillMode=control-group, Slurm
#            scancel): the wrapper, mpirun, every rank
#   rank0    SIGTERM to rank 0 alone
# Each must end the same way: the stream completes (`done`) or gets `shutting_down` (never a
# dropped connection), rank 0 reports the drain, the wrapper exits 0, the socket file is removed,
# and no process of the job survives. The first job also records what listens on TCP (`ss -ltnp`):
# the ranks must have no TCP listener.
#   usage: signals.sh LLAMA2_BINARY MODELS_DIR      (every wait has a deadline; a hang fails)
# shellcheck source=tests/integration/lib.sh
source "$(dirname "$0")/lib.sh" "$@"
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WRAPPER=$ROOT/launch/llama2-mpirun
LLAMA2_REAL=$(readlink -f "$LLAMA2")
# The wrapper's own Open MPI choices are under test: nothing from the caller's environment.
unset OMPI_MCA_btl OMPI_MCA_oob_tcp_if_include OMPI_MCA_odls_base_sigkill_timeout LLAMA2_BIN
# CI containers may forbid cross-memory attach between processes; vader then copies through
# shared memory (the setting tests/integration/mpirun.sh uses too).
export OMPI_MCA_btl_vader_single_copy_mechanism=none

# A model slow enough that a 200-token stream is still running when the signal lands (the
# serve test's model; its servers run one thread per rank).
SLOW=$TMP/slow-model
"$LLAMA2" make-test-model --out "$SLOW" --hidden-size 512 --intermediate-size 1376 --layers 4 \
  --heads 8 --vocab 2048 >/dev/null || { echo "cannot make the slow model"; exit 1; }

JOB="" CLIENT=""
STARTED=()  # every process tree root this script started, for the cleanup
# descendants PID...: the PIDs and all their descendants (one scan of /proc).
descendants() {
  local -A kids=()
  local stat pid rest ppid
  for stat in /proc/[0-9]*/stat; do
    { read -r pid rest <"$stat"; } 2>/dev/null || continue
    rest=${rest##*) }          # after "(comm) ": state ppid ...
    read -r _ ppid _ <<<"$rest"
    kids[$ppid]+=" $pid"
  done
  local queue=("$@") out=() p
  while ((${#queue[@]})); do
    p=${queue[0]}; queue=("${queue[@]:1}")
    out+=("$p")
    # shellcheck disable=SC2206
    [[ -n "${kids[$p]-}" ]] && queue+=(${kids[$p]})
  done
  echo "${out[@]}"
}
# alive PID: the process exists and is not a zombie.
alive() {
  local s
  { s=$(<"/proc/$1/stat"); } 2>/dev/null || return 1
  s=${s##*) }
  [[ "${s:0:1}" != Z ]]
}
cleanup() {
  local p
  for p in $(descendants "${STARTED[@]}"); do kill -KILL "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT

# wait_for PID SECONDS: the exit status of our child PID, or 124 when it is still running then.
wait_for() {
  local pid=$1 end=$((SECONDS + $2))
  while alive "$pid"; do
    ((SECONDS < end)) || return 124
    sleep 0.05
  done
  wait "$pid"
}

# start_job NAME SERVE_ARGS... : the wrapper in the background ($JOB), up when `health` answers.
start_job() {
  local name=$1; shift
  SOCK=$TMP/$name.sock
  # Job control on while starting it: a non-interactive shell starts background commands with
  # SIGINT ignored, and an ignored signal cannot be trapped (the wrapper could not see SIGINT).
  set -m
  LLAMA2_BIN=$LLAMA2 "$WRAPPER" -n 2 -q -- serve --model "$SLOW" --socket "$SOCK" --backend cpu \
    --cpu-threads 1 --quiet "$@" >"$TMP/$name.log" 2>&1 &
  JOB=$!
  set +m
  STARTED+=("$JOB")
  local end=$((SECONDS + 120))
  until "$LLAMA2" client --socket "$SOCK" --health >/dev/null 2>&1; do
    if ! alive "$JOB" || ((SECONDS >= end)); then
      fail "$name: server did not come up"; sed 's/^/    | /' "$TMP/$name.log"; return 1
    fi
    sleep 0.1
  done
}

# start_stream NAME TOKENS: a streaming client ($CLIENT), returns once its first text arrived.
start_stream() {
  local name=$1 n=$2
  "$LLAMA2" client --socket "$SOCK" --prompt "a long answer" -n "$n" --ignore-eos --temperature 0 \
    >"$TMP/$name.client.out" 2>"$TMP/$name.client.err" &
  CLIENT=$!
  STARTED+=("$CLIENT")
  local end=$((SECONDS + 60))
  until [[ -s "$TMP/$name.client.out" ]]; do
    if ! alive "$CLIENT" || ((SECONDS >= end)); then
      fail "$name: no token streamed"; sed 's/^/    | /' "$TMP/$name.client.err"; return 1
    fi
    sleep 0.02
  done
}

rank0_pid() {  # the llama2 process (not a wrapper) of the job with OMPI_COMM_WORLD_RANK=0
  local p
  for p in $(descendants "$JOB"); do
    [[ "$(readlink -f "/proc/$p/exe" 2>/dev/null)" == "$LLAMA2_REAL" ]] || continue
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=0'; then
      echo "$p"; return
    fi
  done
}

# check_end NAME TOKENS EXPECT PIDS... : the job ends cleanly. EXPECT: complete (the stream gets
# `done`) or either (done or shutting_down). PIDS: the job's processes before the signal, none may survive.
check_end() {
  local name=$1 n=$2 expect=$3; shift 3
  local deadline=${STOP_DEADLINE:-150}
  # shellcheck disable=SC2153  # FAILURES: lib.sh's count
  local t0=$SECONDS rc crc p left=() failures=$FAILURES
  wait_for "$JOB" "$deadline"; rc=$?
  local secs=$((SECONDS - t0))
  wait_for "$CLIENT" 30; crc=$?
  # What systemd would SIGKILL after TimeoutStopSec: anything of the job still running.
  for p in "$@"; do alive "$p" && left+=("$p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | cut -c1-80)"); done
  if [[ $rc -eq 0 ]]; then pass "$name: wrapper exit 0 (${secs}s after the signal)"
  else fail "$name: wrapper exit $rc (124: still running after $deadline s)"; fi
  if [[ ! -e "$SOCK" ]]; then pass "$name: socket file removed"; else fail "$name: socket file left behind"; fi
  if [[ ${#left[@]} -eq 0 ]]; then pass "$name: no process of the job left"
  else fail "$name: ${#left[@]} process(es) left: ${left[*]}"; fi
  if [[ $name == all ]]; then
    # mpirun, signalled too, stops forwarding the ranks' output (it sleeps through its kill
    # sequence until the wrapper ends it), so rank 0's own lines may be lost: the wrapper's
    # account of the ranks' exit statuses stands in for them.
    if grep -q "every rank (2) exited 0" "$TMP/$name.log"; then pass "$name: every rank exited 0"
    else fail "$name: the wrapper did not report every rank exiting 0"; fi
  elif grep -q "draining (1 in flight" "$TMP/$name.log"; then pass "$name: rank 0 drained with the stream in flight"
  else fail "$name: no 'draining (1 in flight' from rank 0"; fi
  local err; err=$(<"$TMP/$name.client.err")
  if [[ $crc -eq 0 && "$err" == *"finish_reason=length tokens=$n "* ]]; then
    pass "$name: stream completed ($n tokens)"
  elif [[ $expect == either && $crc -eq 1 && "$err" == *"shutting_down"* ]]; then
    pass "$name: stream ended with shutting_down"
  else
    fail "$name: stream: client exit $crc: $err"
  fi
  [[ $FAILURES -eq $failures ]] || { echo "    job log:"; sed 's/^/    | /' "$TMP/$name.log"; }
}

# ---- SIGINT to the wrapper; a drain long enough for the stream to finish (on a loaded 2-core CI
# machine 100 tokens of this model have taken 15 s). Every step sleeps 40 ms (the test hook), so
# the stream is still running when the signal comes however fast the machine is (on an idle one
# the 100 tokens once finished before it: "draining (0 in flight"). Also: what listens.
if LLAMA2_TEST_STEP_DELAY_MS=40 start_job sigint --shutdown-timeout-ms 120000 &&
  start_stream sigint 100; then
  if command -v ss >/dev/null; then
    pids=" $(descendants "$JOB") "
    ss -ltnpH >"$TMP/ss.txt" 2>/dev/null
    echo "TCP listeners of the job (ss -ltnp):"
    ours=0 rank_listeners=0
    while IFS= read -r line; do
      while IFS= read -r p; do
        [[ "$pids" == *" ${p#pid=} "* ]] || continue
        echo "    $line"; ours=1
        [[ "$line" == *'"llama2"'* ]] && rank_listeners=$((rank_listeners + 1))
      done < <(grep -o 'pid=[0-9]*' <<<"$line")
    done <"$TMP/ss.txt"
    [[ $ours -eq 1 ]] || echo "    (none)"
    if [[ $rank_listeners -eq 0 ]]; then pass "listen: no rank listens on TCP"
    else fail "listen: $rank_listeners TCP listener(s) held by llama2 ranks"; fi
  else
    echo "skip: ss not installed, listeners not checked"
  fi
  before=$(descendants "$JOB")
  kill -INT "$JOB"
  # shellcheck disable=SC2086
  check_end sigint 100 complete $before
fi

# ---- systemd KillMode=mixed (launch/systemd/llama2.service): SIGTERM to the main process only,
# SIGKILL to what is left after TimeoutStopSec. A short drain cuts the stream.
if LLAMA2_TEST_STEP_DELAY_MS=10 start_job mixed --shutdown-timeout-ms 300 &&
  start_stream mixed 480; then
  before=$(descendants "$JOB")
  kill -TERM "$JOB"
  # shellcheck disable=SC2086
  STOP_DEADLINE=$(sed -n 's/^TimeoutStopSec=//p' "$ROOT/launch/systemd/llama2.service") \
    check_end mixed 480 either $before
fi

# ---- SIGTERM to every process of the job at once (scancel, KillMode=control-group).
if LLAMA2_TEST_STEP_DELAY_MS=10 start_job all --shutdown-timeout-ms 2000 &&
  start_stream all 480; then
  before=$(descendants "$JOB")
  # shellcheck disable=SC2086
  kill -TERM $before
  # shellcheck disable=SC2086
  check_end all 480 either $before
fi

# ---- SIGTERM to rank 0 alone. 480 tokens: finding rank 0's pid (a /proc walk) must not outlast
# the stream, or the drain finds nothing in flight (100 tokens did, on a loaded 2-core machine);
# the drain may take as long as the stream needs (a loaded machine once needed more than 30 s).
# The streams below run 10 ms a step at least (the test hook), so that on an idle, fast machine
# they are still running when the signal comes.
if LLAMA2_TEST_STEP_DELAY_MS=10 start_job rank0 --shutdown-timeout-ms 120000 &&
  start_stream rank0 480; then
  before=$(descendants "$JOB")
  r0=$(rank0_pid)
  if [[ -n "$r0" ]]; then
    kill -TERM "$r0"
    # shellcheck disable=SC2086
    check_end rank0 480 complete $before
  else
    fail "rank0: rank 0 not found among $before"
  fi
fi

finish
