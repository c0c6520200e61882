#!/usr/bin/env bash
# A stalled rank under the supervising wrapper (launch/llama2-mpirun), the way systemd and Slurm
# users start serve: rank 1 stalls at step 3 (LLAMA2_TEST_STALL), the step watchdog answers the
# client and rank 0 exits 3; the wrapper must then end the whole job in bounded time (it SIGKILLs
# the stalled rank 5 s after the failure instead of sitting out mpirun's 2T-second kill sequence,
# ~80 s for serve), exit 3, leave no socket file and no process behind.
#   usage: wrapper_watchdog.sh LLAMA2 MODELS
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
sock=$TMP/wd.sock
export OMPI_MCA_btl_vader_single_copy_mechanism=none
LLAMA2_BIN=$LLAMA2 LLAMA2_TEST_STALL=3:1 timeout --kill-after=5 100 \
  "$ROOT/launch/llama2-mpirun" -n 2 -q -- serve --model "$MODELS/tiny-gqa" --socket "$sock" \
  --step-timeout-ms 3000 >"$TMP/wrapper.out" 2>&1 &
wrapper=$!
for _ in $(seq 300); do [[ -S "$sock" ]] && break; sleep 0.1; done
[[ -S "$sock" ]] || { fail "server did not start"; cat "$TMP/wrapper.out"; exit 1; }
t0=$EPOCHREALTIME
"$LLAMA2" client --socket "$sock" --prompt "hello there" --max-new-tokens 20 >"$TMP/client.out" 2>&1
client_rc=$?
client_s=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
wait "$wrapper"
rc=$?
total_s=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
echo "client answered after $client_s s (exit $client_rc); wrapper exit $rc after $total_s s"
if [[ $client_rc -ne 0 ]] && grep -q "internal: step 3 stalled" "$TMP/client.out"; then
  pass "the client got the watchdog's error"
else
  fail "client: exit $client_rc: $(cat "$TMP/client.out")"
fi
[[ $rc -eq 3 ]] && pass "wrapper exit 3" || { fail "wrapper exit $rc (expected 3)"; cat "$TMP/wrapper.out"; }
# The bound: the watchdog (3 s + its own exit) + 5 s of grace + 1 s for mpirun, with room for a
# loaded CI machine; mpirun's own sequence would take ~80 s.
if awk -v t="$total_s" 'BEGIN { exit !(t <= 30) }'; then pass "job ended in $total_s s (<= 30)"; else fail "job took $total_s s"; fi
[[ ! -e "$sock" ]] && pass "socket file removed" || fail "socket file left behind"
if pgrep -f -- "--socket $sock" >/dev/null; then fail "processes left: $(pgrep -af -- "--socket $sock")"; else pass "no process left"; fi
grep -q "rank 0 exited 3: ending the job" "$TMP/wrapper.out" && pass "the wrapper said why" || fail "no wrapper note: $(cat "$TMP/wrapper.out")"
echo "$PASSES passed, $FAILURES failed"
[[ $FAILURES -eq 0 ]]
