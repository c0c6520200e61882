# Session 18, call 5 (one H200), the final tree: the rows of issue 19's table not measured since it
# was filed, each with its step-kind summary (the server's per-step log): (a) `llama2 batch`
# offline, 1024 prompts of 128 random token ids + 128 new tokens, 7B fp16, max batch 512
# (benchmarks/serve/batch_offline.sh); (b) `serve` saturation, 1024 requests 128 + 128, max batch
# 512: 7B and 13B fp16 weights, fp16 and fp8 KV cache (saturation_ab.sh, one server each).
set -u
source benchmarks/node_call.sh
node_build llama2
SKIP_BUILD=1 timeout 300 bash benchmarks/serve/batch_offline.sh "$O/batch7b" >"$O/batch7b.txt" 2>&1
note "batch offline 7b rc=$? $(head -1 "$O/batch7b/summary.txt")"
rm -f "$O/batch7b/prompts.jsonl" "$O/batch7b/results.jsonl"
pack
sat sat7b_fp16kv LLAMA2_PREFILL_SPLIT 1
SERVE_ARGS="--kv-cache-dtype fp8" sat sat7b_fp8kv LLAMA2_PREFILL_SPLIT 1
SYNTHETIC=13b sat sat13b_fp16kv LLAMA2_PREFILL_SPLIT 1
SYNTHETIC=13b SERVE_ARGS="--kv-cache-dtype fp8" sat sat13b_fp8kv LLAMA2_PREFILL_SPLIT 1
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
