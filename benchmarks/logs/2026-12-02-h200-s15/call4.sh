# Session 15, call 4: the CUDA reference checks the batch-1 RoPE epilogue runs under: quantized weights (wquant), the fp8 KV cache (fp8kv), fp32 vs the CPU fixtures and logprobs (logprobs), np 1.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/all.tgz.tmp -C $O . 2>/dev/null && mv $OUT/all.tgz.tmp $OUT/all.tgz; }
{ date -u; git log --oneline -1; git status --short | head; nvidia-smi -L; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 240 bash tests/gpu/node_build.sh llama2 llama2_gpu_tests llama2_reference_test > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
for C in logprobs fp8kv wquant; do
CHECKS=$C NPS=1 SKIP_BUILD=1 timeout 300 bash tests/reference/gpu_check.sh $O/$C > $O/$C.log 2>&1
echo "$C rc=$? $((SECONDS-t0)) s" >> $O/env.txt; grep -E "^(RESULT|NOISE|STEP)" $O/$C/summary.txt >> $O/env.txt; rm -rf $O/$C/fixtures* $O/$C/logs; pack
done
date -u >> $O/env.txt; pack; cat $O/env.txt
