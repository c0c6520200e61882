# Session 18, call 3 (one H200): the key split with the merge kernel rewritten (a thread per 4
# columns of a row, 8 rows a block). (a) every GPU kernel test (the split's cases, and every kernel
# launched through launch_kernel_in_clusters since session 17); (b) `llama2_bench_kernels prefill`
# with the key-split section (few new tokens over a cached prefix: none / automatic / forced
# 2-16); (c) prefix_ttft.sh with the split, without, with (alternating servers, 8 trials each);
# (d) 7B fp16 prefill 2048 (5 repeats) and decode batches 1 and 64 on the final tree.
set -u
source benchmarks/node_call.sh
node_build llama2 llama2_gpu_tests llama2_bench_e2e llama2_bench_kernels
gpu_tests
timeout 150 build-gpu/llama2_bench_kernels prefill >"$O/bench_prefill.log" 2>&1
note "bench prefill rc=$?"
grep -E "FAIL|split|new=(32|128|8) " "$O/bench_prefill.log" >>"$O/env.txt"
pack
for run in split nosplit split2; do
  envs=""
  [[ $run == nosplit ]] && envs="-x LLAMA2_PREFILL_SPLIT=0"
  SKIP_BUILD=1 SERVE_ENV="$envs" timeout 200 bash benchmarks/prefix/prefix_ttft.sh "$O/prefix_$run" \
    >"$O/prefix_$run.txt" 2>&1
  note "prefix $run rc=$? $(head -4 "$O/prefix_$run/summary.txt" | tr '\n' ' ')"
  pack
done
e2e prefill2048 --batches "" --prefill-lens 2048 --repeats 5
e2e decode_b1_b64 --batches 1,64 --prefill-lens ""
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
