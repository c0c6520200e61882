# Session 18, call 4 (one H200): (a) why call 2's profiled 2048-token prefill (46.6 ms, eager with
# per-op events, no start-up warm-up) beat the plain ones (49.1-49.2 ms): 7B fp16 prefill 2048, 5
# repeats each: default, LLAMA2_WARMUP=0, LLAMA2_PDL=0; (b) decode attention's split at small
# batches: 7B decode batch 1 and 4 (contexts 129-192, graph bound 256: 4 partitions of 64 + the
# merge kernel by the rule) with LLAMA2_DECODE_MIN_PARTITION=0 (the rule) / 256 (one partition,
# no merge) / 128, fp16, and batch 1 with fp8 weights 0 / 256; (c) the attention kernel tests
# (the prefill cases' shared set-up, decode with min_partition 256); (d) the CUDA reference check
# with quantized weights on the final tree (CHECKS=wquant NPS=1: fp8 and int8 vs HF).
set -u
source benchmarks/node_call.sh
node_build llama2 llama2_reference_test llama2_bench_e2e llama2_gpu_tests
gpu_tests 'attention_*'
e2e p2048_default --batches "" --prefill-lens 2048 --repeats 5
ENVS="-x LLAMA2_WARMUP=0" e2e p2048_warmup0 --batches "" --prefill-lens 2048 --repeats 5
ENVS="-x LLAMA2_PDL=0" e2e p2048_pdl0 --batches "" --prefill-lens 2048 --repeats 5
for p in 0 256 128; do
  ENVS="-x LLAMA2_DECODE_MIN_PARTITION=$p" e2e dec_fp16_p$p --batches 1,4 --prefill-lens ""
done
for p in 0 256; do
  ENVS="-x LLAMA2_DECODE_MIN_PARTITION=$p" e2e dec_fp8_p$p --batches 1 --prefill-lens "" --weight-dtype fp8
done
pack
ref_check wquant
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
