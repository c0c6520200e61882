# Session 18, call 2 (one H200): the prefill kernel's key split (LLAMA2_PREFILL_SPLIT, default on).
# (a) its kernel tests (every attention_prefill case: the new split cases, forced 2-16 splits and
# the automatic choice, poisoned workspace; the existing cases unchanged); (b) prefix_ttft.sh
# (1,024-token cached prefix + 32-token suffix, 8 trials) with the split (default) and with
# LLAMA2_PREFILL_SPLIT=0, alternating servers; (c) the per-op profile of a hit step with the split;
# (d) the per-op profile of a 2048-token prefill (llama2_bench_e2e, eager) for issue 19's
# prefill row.
set -u
source benchmarks/node_call.sh
node_build llama2 llama2_gpu_tests llama2_bench_e2e
timeout 150 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc='attention_prefill*' >"$O/gpu_tests.log" 2>&1
note "tc attention_prefill rc=$? $(tail -3 "$O/gpu_tests.log" | grep -E 'test cases|assertions' | tr '\n' ' ')"
grep -E -A8 "ERROR|FAILED" "$O/gpu_tests.log" | head -40 >>"$O/env.txt"
pack
for run in split nosplit; do
  envs=""
  [[ $run == nosplit ]] && envs="-x LLAMA2_PREFILL_SPLIT=0"
  SKIP_BUILD=1 SERVE_ENV="$envs" timeout 200 bash benchmarks/prefix/prefix_ttft.sh "$O/prefix_$run" \
    >"$O/prefix_$run.txt" 2>&1
  note "prefix $run rc=$? $(head -4 "$O/prefix_$run/summary.txt" | tr '\n' ' ')"
  pack
done
SKIP_BUILD=1 TRIALS=3 SERVE_ENV="-x LLAMA2_OP_PROFILE=1" timeout 200 \
  bash benchmarks/prefix/prefix_ttft.sh "$O/prefix_prof" >"$O/prefix_prof.txt" 2>&1
note "prefix profile rc=$?"
grep -E "tokens (32|1056) " "$O/prefix_prof/on.server.log" | tail -4 >>"$O/env.txt"
pack
ENVS="-x LLAMA2_OP_PROFILE=1" e2e prof2048 --batches "" --prefill-lens 2048 --repeats 1 --warmup 1
grep -E "op-profile" "$O/prof2048.log" | tail -2 >>"$O/env.txt"
e2e prefill2048 --batches "" --prefill-lens 2048
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
