# Session 17, call 2: call 1's fused all-reduce test hung for the whole 300 s (the first test case,
# the plain one-shot all-reduce, passed). The test now syncs after the unfused and after the fused
# launches with a 20 s watchdog that names the stage, and runs plain launches before programmatic
# ones; each case runs on its own under 60 s.
set -u
source benchmarks/node_call.sh
node_build llama2_gpu_tests
for tc in '*all-reduce: ranks*' '*unfused numbers*' '*fused form refuses*' 'rmsnorm*,add_rmsnorm*'; do
  timeout 60 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc="$tc" >>"$O/gpu_tests.log" 2>&1
  note "tc '$tc' rc=$? $(tail -3 "$O/gpu_tests.log" | grep -E 'test cases|assertions' | tr '\n' ' ')"
  grep -E "HANG|ERROR|FAILED" "$O/gpu_tests.log" | tail -8 >>"$O/env.txt"
done
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
