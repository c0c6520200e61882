#!/usr/bin/env bash
# The signal handling of launch/llama2-mpirun with a fake mpirun (no MPI needed): which process
# gets which signal, the exit statuses, a stop before rank 0 runs, a second signal, a lingering
# mpirun; and the systemd unit (launch/systemd/llama2.service). The same paths with real MPI and a
# real server: tests/integration/signals.sh. Prints "N passed, M failed" last; exit 1 on failure.
#   usage: bash tests/launch/test_supervise.sh
# shellcheck source=tests/launch/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
FAKEBIN=$TMP/bin
mkdir -p "$FAKEBIN"
NO_SMI=$TMP/no-such-nvidia-smi

# ---- supervision (signals), with a fake mpirun that starts the ranks like Open MPI (each rank in
# its own process group, the rank program from llama2-rank on) and fake `serve` ranks that log the
# signals they get. FAKE_MPIRUN_GO=FILE: start the ranks only once FILE exists.
# FAKE_MPIRUN_LINGER=1: on SIGTERM keep running (Open MPI 4.1 sleeps through its kill sequence).
cat >"$FAKEBIN/sup-mpirun" <<'EOF'
#!/usr/bin/env bash
[[ ${1-} == --version ]] && { echo "mpirun (Open MPI) 4.1.4"; exit 0; }  # the wrapper's probe
np=1 prog=()
while (($#)); do case "$1" in -np) np=$2; shift 2 ;; */llama2-rank) prog=("$@"); break ;; *) shift ;; esac; done
signalled=0
trap 'signalled=1' TERM INT
exec 3<> <(:)
if [[ -n "${FAKE_MPIRUN_GO-}" ]]; then until [[ -e "$FAKE_MPIRUN_GO" ]]; do read -t 0.02 -u 3; done; fi
set -m
pids=()
for ((r = 0; r < np; r++)); do OMPI_COMM_WORLD_RANK=$r "${prog[@]}" & pids+=($!); done
set +m
rc=0
for p in "${pids[@]}"; do
  while :; do wait "$p"; s=$?; kill -0 "$p" 2>/dev/null || break; done
  if ((s > 128)); then wait "$p" 2>/dev/null; t=$?; [[ $t -ne 127 ]] && s=$t; fi
  [[ $rc -ne 0 ]] || rc=$s
done
if ((signalled)); then
  [[ "${FAKE_MPIRUN_LINGER-}" == 1 ]] && read -t 30 -u 3
  exit 1
fi
exit "$rc"
EOF
# Open MPI 5's mpirun (PRRTE) as the wrapper sees it: on SIGTERM or SIGINT, or when a rank exits
# non-zero unless `--runtime-options recoverable,error-nonzero-status=false` was given, SIGTERM to every rank, SIGKILL 0.25 s later, exit 1
# (logged); otherwise it exits 0 once every rank has ended, whatever their statuses. Like PRRTE it
# starts the ranks with an empty signal mask, whatever its own.
cat >"$FAKEBIN/sup-mpirun5" <<'EOF'
#!/usr/bin/env bash
[[ ${1-} == --version ]] && { echo "mpirun (Open MPI) 5.0.7"; exit 0; }
np=1 prog=() recovery=0
while (($#)); do
  case "$1" in
    -np) np=$2; shift 2 ;;
    --runtime-options) [[ $2 == *recoverable* && $2 == *error-nonzero-status=false* ]] && recovery=1; shift 2 ;;
    */llama2-rank) prog=("$@"); break ;;
    *) shift ;;
  esac
done
pids=()
abort() {
  local p
  echo "fake mpirun: ending the job at once" >>"$FAKE_LOG"
  for p in "${pids[@]}"; do kill -TERM -- "-$p" 2>/dev/null; done
  sleep 0.25
  for p in "${pids[@]}"; do kill -KILL -- "-$p" 2>/dev/null; done
  exit 1
}
trap abort TERM INT
set -m
for ((r = 0; r < np; r++)); do
  OMPI_COMM_WORLD_RANK=$r python3 -c 'import os, signal, sys
signal.pthread_sigmask(signal.SIG_SETMASK, set())
os.execvp(sys.argv[1], sys.argv[1:])' "${prog[@]}" &
  pids+=($!)
done
set +m
left=$np
while ((left > 0)); do
  id=""
  wait -n -p id
  s=$?
  [[ -n "$id" ]] || continue
  left=$((left - 1))
  ((s == 0 || recovery)) || abort
done
exit 0
EOF
# Like serve, rank 0 stops on SIGTERM and the others follow it (here: when rank 0 logged its stop).
# FAKE_HOLD=1: rank 0 catches SIGTERM but does not stop; FAKE_RC: every rank's exit status;
# FAKE_RUN_S: how long a rank runs before it stops by itself (20 s); FAKE_CRASH_RANK: that rank
# exits at once with FAKE_CRASH_RC (else FAKE_RC, else 3).
cat >"$FAKEBIN/sup-llama2" <<'EOF'
#!/usr/bin/env bash
r=${OMPI_COMM_WORLD_RANK:-?} stop=0
trap 'echo "rank $r: TERM" >>"$FAKE_LOG"; [[ "${FAKE_HOLD-}" == 1 || $r != 0 ]] || stop=1' TERM
trap 'echo "rank $r: USR2" >>"$FAKE_LOG"' USR2
echo "rank $r: started" >>"$FAKE_LOG"
[[ "${FAKE_CRASH_RANK-}" == "$r" ]] && exit "${FAKE_CRASH_RC:-${FAKE_RC:-3}}"  # fails at once, never logs "stopped"
exec 3<> <(:)
end=$((SECONDS + ${FAKE_RUN_S:-20}))
until ((stop || SECONDS >= end)); do
  read -t 0.05 -u 3
  [[ $r != 0 ]] && grep -q "rank 0: stopped" "$FAKE_LOG" && stop=1
done
echo "rank $r: stopped" >>"$FAKE_LOG"
exit "${FAKE_RC:-0}"
EOF
chmod +x "$FAKEBIN"/sup-*
# sup NAME VARS... -- WRAPPER_ARGS... : the wrapper in the background (own process group, so that
# SIGINT is not ignored), its pid in SUP_PID; the fake ranks log to $TMP/NAME.log.
sup() {
  local name=$1; shift
  local vars=()
  while [[ "$1" != "--" ]]; do vars+=("$1"); shift; done
  shift
  : >"$TMP/$name.log"
  mkdir -p "$TMP/$name.d"  # TMPDIR of the wrapper: its state directory is found there
  set -m
  (
    export TMPDIR=$TMP/$name.d
    for v in "${vars[@]}"; do export "${v?}"; done
    exec "$MPIRUN_SH" "$@"
  ) >"$TMP/$name.out" 2>"$TMP/$name.err" &
  SUP_PID=$!
  set +m
}
sup_env=(MPIRUN="$FAKEBIN/sup-mpirun" LLAMA2_BIN="$FAKEBIN/sup-llama2" NVIDIA_SMI="$NO_SMI" _LLAMA2_TEST_GRACE_S=1)
exec {nap}<> <(:)
until_pid0() {  # NAME : wait (up to 10 s) until rank 0's llama2-rank has written its pid
  local i f
  for ((i = 0; i < 500; i++)); do
    for f in "$TMP/$1.d"/llama2-mpirun.*/rank0.child; do [[ -s "$f" ]] && return 0; done
    read -r -t 0.02 -u "$nap"
  done
  fail "$1: rank 0 never wrote its pid"; show "$1"; return 1
}
until_log() {  # NAME PATTERN COUNT : wait (up to 10 s) until the fake ranks logged PATTERN COUNT times
  local i n
  for ((i = 0; i < 500; i++)); do
    n=$(grep -c -- "$2" "$TMP/$1.log")
    [[ $n -ge $3 ]] && return 0
    read -r -t 0.02 -u "$nap"
  done
  fail "$1: '$2' not logged $3 time(s)"; show "$1"; return 1
}
sup_end() {  # NAME : wait (up to 20 s) for the wrapper; its status to $TMP/NAME.rc
  local i
  for ((i = 0; i < 1000; i++)); do kill -0 "$SUP_PID" 2>/dev/null || break; read -r -t 0.02 -u "$nap"; done
  if kill -0 "$SUP_PID" 2>/dev/null; then kill -KILL -- "-$SUP_PID" 2>/dev/null; fi
  wait "$SUP_PID"; echo $? >"$TMP/$1.rc"
}
expect_log() {  # NAME COUNT PATTERN
  local n; n=$(grep -c -- "$3" "$TMP/$1.log")
  if [[ $n -eq $2 ]]; then pass "$1: '$3' logged $2 time(s)"; else fail "$1: '$3' logged $n time(s), expected $2"; show "$1"; cat "$TMP/$1.log"; fi
}

# SIGINT to the wrapper: SIGTERM to rank 0 only; the job ends 0.
sup sup.int "${sup_env[@]}" FAKE_LOG="$TMP/sup.int.log" -- -n 2 -q -- serve --model /m
until_log sup.int started 2 && until_pid0 sup.int && kill -INT "$SUP_PID"
sup_end sup.int
expect_rc sup.int 0
expect_log sup.int 1 "rank 0: TERM"
expect_log sup.int 0 "rank 1: TERM"
expect_log sup.int 2 "stopped"
expect_err sup.int "SIGINT: SIGTERM to rank 0"
# SIGUSR2 to the wrapper (the unit's ExecReload=): to rank 0 only (serve re-reads its key file).
sup sup.usr2 "${sup_env[@]}" FAKE_LOG="$TMP/sup.usr2.log" -- -n 2 -q -- serve --model /m
until_log sup.usr2 started 2 && until_pid0 sup.usr2 && kill -USR2 "$SUP_PID" &&
  until_log sup.usr2 "rank 0: USR2" 1 && kill -TERM "$SUP_PID"
sup_end sup.usr2
expect_rc sup.usr2 0
expect_log sup.usr2 1 "rank 0: USR2"
expect_log sup.usr2 0 "rank 1: USR2"
expect_err sup.usr2 "SIGUSR2: to rank 0 (serve re-reads --api-key-file)"
# SIGTERM to every process at once; mpirun, signalled too, lingers: ended once every rank is done.
sup sup.all "${sup_env[@]}" FAKE_LOG="$TMP/sup.all.log" FAKE_MPIRUN_LINGER=1 -- -n 2 -q -- serve --model /m
tree_pids() {  # PID: PID and all its descendants
  local -A kids=()
  local pid ppid queue=("$1") out=()
  while read -r pid ppid; do kids[$ppid]+=" $pid"; done < <(ps -e -o pid=,ppid=)
  while ((${#queue[@]})); do
    out+=("${queue[0]}")
    # shellcheck disable=SC2206
    queue=("${queue[@]:1}" ${kids[${queue[0]}]-})
  done
  echo "${out[@]}"
}
# shellcheck disable=SC2046
until_log sup.all started 2 && until_pid0 sup.all && kill -TERM $(tree_pids "$SUP_PID") 2>/dev/null
sup_end sup.all
expect_rc sup.all 0
expect_err sup.all "SIGKILL to mpirun"
expect_err sup.all "every rank (2) exited 0: exit 0"
# A rank that fails decides the status, signal or not.
sup sup.fail "${sup_env[@]}" FAKE_LOG="$TMP/sup.fail.log" FAKE_RC=3 -- -n 2 -q -- serve --model /m
until_log sup.fail started 2 && until_pid0 sup.fail && kill -TERM "$SUP_PID"
sup_end sup.fail
expect_rc sup.fail 3
# A rank fails (the watchdog's exit 3) while another one would run on (stuck in a collective: here
# it ignores SIGTERM and waits 20 s for rank 0): the job ends with the failure's status after the
# grace period (1 s here), the survivor SIGKILLed, not after mpirun's kill sequence.
t0=$SECONDS
sup sup.crash "${sup_env[@]}" FAKE_LOG="$TMP/sup.crash.log" FAKE_CRASH_RANK=0 FAKE_RC=3 -- -n 2 -q -- serve --model /m
sup_end sup.crash
expect_rc sup.crash 3
expect_err sup.crash "rank 0 exited 3: ending the job"
expect_err sup.crash "SIGKILL to 1 rank(s) still running 1 s after the failure"
expect_log sup.crash 0 "rank 1: stopped"
if ((SECONDS - t0 <= 8)); then pass "sup.crash: ended in $((SECONDS - t0)) s (<= 8)"; else fail "sup.crash: took $((SECONDS - t0)) s"; fi
# A stop asked for before rank 0 runs reaches it when it starts.
sup sup.early "${sup_env[@]}" FAKE_LOG="$TMP/sup.early.log" FAKE_MPIRUN_GO="$TMP/sup.early.go" -- -n 2 -- serve --model /m
for ((i = 0; i < 500; i++)); do [[ -s "$TMP/sup.early.err" ]] && break; read -r -t 0.02 -u "$nap"; done  # "+ mpirun ..."
kill -TERM "$SUP_PID"
until grep -q "rank 0 is starting" "$TMP/sup.early.err" || ((i++ > 1000)); do read -r -t 0.02 -u "$nap"; done
: >"$TMP/sup.early.go"
sup_end sup.early
expect_rc sup.early 0
expect_err sup.early "rank 0 is starting; it will be stopped as soon as it runs"
expect_log sup.early 1 "rank 0: TERM"
# A second signal ends the job now: SIGKILL to the ranks that do not stop.
sup sup.twice "${sup_env[@]}" FAKE_LOG="$TMP/sup.twice.log" FAKE_HOLD=1 -- -n 2 -q -- serve --model /m
until_log sup.twice started 2 && until_pid0 sup.twice && kill -TERM "$SUP_PID" && until_log sup.twice "rank 0: TERM" 1 && kill -TERM "$SUP_PID"
sup_end sup.twice
expect_rc sup.twice 137
expect_err sup.twice "second signal (SIGTERM): ending the job now (SIGKILL to 2 rank(s) on this host)"

# Open MPI 5: SIGTERM to every process at once. The wrapper started mpirun with the stop signals
# blocked, so it does not end the job at once: rank 0 stops, rank 1 follows it, all exit 0.
sup sup5.all "${sup_env[@]}" MPIRUN="$FAKEBIN/sup-mpirun5" FAKE_LOG="$TMP/sup5.all.log" -- -n 2 -q -- serve --model /m
# shellcheck disable=SC2046
until_log sup5.all started 2 && until_pid0 sup5.all && kill -TERM $(tree_pids "$SUP_PID") 2>/dev/null
sup_end sup5.all
expect_rc sup5.all 0
expect_log sup5.all 2 "stopped"
expect_log sup5.all 0 "fake mpirun: ending the job at once"
expect_err sup5.all "every rank (2) exited 0"
# Open MPI 5: a rank fails. With those runtime options mpirun leaves the other ranks running (rank 0
# finishes by itself within the grace period) and exits 0; the wrapper exits with the failure's 3.
sup sup5.crash "${sup_env[@]}" MPIRUN="$FAKEBIN/sup-mpirun5" FAKE_LOG="$TMP/sup5.crash.log" \
  FAKE_CRASH_RANK=1 FAKE_CRASH_RC=3 FAKE_RUN_S=1 _LLAMA2_TEST_GRACE_S=5 -- -n 2 -q -- serve --model /m
sup_end sup5.crash
expect_rc sup5.crash 3
expect_log sup5.crash 1 "rank 0: stopped"
expect_log sup5.crash 0 "fake mpirun: ending the job at once"
expect_err sup5.crash "rank 1 exited 3: ending the job"

# ============================================================================ systemd units
for UNIT in "$ROOT/launch/systemd/llama2.service" "$ROOT/launch/systemd/llama2-http.service"; do
u=$(basename "$UNIT")
unit_get() { sed -n "s/^$1=//p" "$UNIT"; }
expect_eq "$u: KillMode=mixed (SIGTERM to the wrapper only)" "$(unit_get KillMode)" mixed
expect_eq "$u: the wrapper is the main process" "$(unit_get ExecStart | cut -d' ' -f1)" /opt/llama2/launch/llama2-mpirun
stop_s=$(unit_get TimeoutStopSec)
drain_ms=$(grep -v '^#' "$UNIT" | grep -o -- '--shutdown-timeout-ms [0-9][0-9]*' | cut -d' ' -f2)
if [[ -n "$drain_ms" && "$stop_s" =~ ^[0-9]+$ ]] && ((stop_s * 1000 >= drain_ms + 10000)); then
  pass "$u: TimeoutStopSec=$stop_s covers the drain (${drain_ms} ms) + 10 s"
else
  fail "$u: TimeoutStopSec='$stop_s' does not cover --shutdown-timeout-ms '$drain_ms' + 10 s"
fi
if command -v systemd-analyze >/dev/null 2>&1; then
  # The unit as installed from this checkout (verify checks that ExecStart is executable).
  sed "s|/opt/llama2|$ROOT|g" "$UNIT" >"$TMP/$u"
  run "$u.verify" systemd-analyze verify "$TMP/$u"
  expect_rc "$u.verify" 0
  expect_eq "$u.verify: no warnings" "$(cat "$TMP/$u.verify.out" "$TMP/$u.verify.err")" ""
else
  echo "skip: systemd-analyze not installed; $u is not verified"
fi
done
# The HTTP unit: --http, the key file's path from EnvironmentFile= (no key in the unit), and a
# reload that is SIGUSR2 to the wrapper (the sup.usr2 case above: it reaches rank 0).
# shellcheck disable=SC2016  # $MAINPID is systemd's, literally
expect_eq "llama2-http.service: ExecReload= sends SIGUSR2 to the wrapper" "$(unit_get ExecReload)" '/bin/kill -USR2 $MAINPID'
expect_eq "llama2-http.service: EnvironmentFile= names the key file's settings" "$(unit_get EnvironmentFile)" /etc/llama2/http.env
if grep -v '^#' "$UNIT" | grep -q -- '--http 0.0.0.0:8000' && ! grep -v '^#' "$UNIT" | grep -q -- '--api-key'; then
  pass "llama2-http.service: --http, and no key on the command line"
else
  fail "llama2-http.service: expected --http 0.0.0.0:8000 and no --api-key in ExecStart"
fi
# The wrapper must refuse nothing of the unit's serve line: a dry run prints the command.
run http.dry env LLAMA2_API_KEY_FILE=/dev/null "$MPIRUN_SH" -n 2 --dry-run -- serve --model /m --http 0.0.0.0:8000 --access-log json
expect_rc http.dry 0

echo "$PASSES passed, $FAILURES failed"
[[ $FAILURES -eq 0 ]]
