# shellcheck shell=bash
# Issue 21, fifth call on `nvidia-h200-x2` (prepared in session 18; NOT RUN). About 2 minutes:
# session 18's prefill key split (LLAMA2_PREFILL_SPLIT) at TP 2, where each rank has half the heads
# (a prefix hit's grid is 16 blocks, not 32): prefix_ttft.sh at -np 2 with the split (default) and
# without, fresh servers, 8 trials each.
set -u
source benchmarks/node_call.sh
node_build llama2
for run in split nosplit; do
  envs=""
  [[ $run == nosplit ]] && envs="-x LLAMA2_PREFILL_SPLIT=0"
  NP=2 SKIP_BUILD=1 SERVE_ENV="$envs" timeout 240 bash benchmarks/prefix/prefix_ttft.sh \
    "$O/prefix_tp2_$run" >"$O/prefix_tp2_$run.txt" 2>&1
  note "prefix tp2 $run rc=$? $(head -4 "$O/prefix_tp2_$run/summary.txt" | tr '\n' ' ')"
  pack
done
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
