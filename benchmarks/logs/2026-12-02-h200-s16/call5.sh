# Session 16, call 5 (main 7925b27): serving-level probes for the saturation targets. 13B fp8 weights
# + fp8 KV saturation with LLAMA2_FP8_TUNE 0 vs 1 (cuBLASLt algorithms timed at start-up; mixed
# steps are prefill-sized products, where call 3 saw 3-5%), two alternating rounds; the prefill
# chunk 4096 vs 2048 for 13B fp8 and 7B fp16.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source launch/env.sh >/dev/null 2>&1
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/all.tgz.tmp -C $O . 2>/dev/null && mv $OUT/all.tgz.tmp $OUT/all.tgz; }
{ date -u; git log --oneline -1; git status --short | head; nvidia-smi -L; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 200 bash tests/gpu/node_build.sh llama2 > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
sat() { local name=$1 var=$2 vals=$3; shift 3; local t1=$SECONDS; env SKIP_BUILD=1 "$@" timeout 240 bash benchmarks/serve/saturation_ab.sh $O/$name $var "$vals" > $O/$name.txt 2>&1; echo "$name rc=$? $(grep -E 'listening|tok/s' $O/$name.txt | sed 's/TTFT.*errors/errors/' | tr '\n' ' ') [$((SECONDS-t1)) s] $((SECONDS-t0)) s" >> $O/env.txt; for f in $O/$name/*.steps.md; do echo "$f"; grep -E '^\| (decode|mixed)' $f; done >> $O/env.txt; rm -f $O/$name/*.steps; pack; }
F8="--kv-cache-dtype fp8 --weight-dtype fp8"
sat tune13b_1 LLAMA2_FP8_TUNE "0 1" SYNTHETIC=13b SERVE_ARGS="$F8"
sat tune13b_2 LLAMA2_FP8_TUNE "1 0" SYNTHETIC=13b SERVE_ARGS="$F8"
sat chunk4096_13b LLAMA2_FP8_TUNE 0 SYNTHETIC=13b PREFILL_CHUNK=4096 SERVE_ARGS="$F8"
sat chunk4096_7b LLAMA2_FP8_TUNE 0 PREFILL_CHUNK=4096
sat chunk2048_7b LLAMA2_FP8_TUNE 0
date -u >> $O/env.txt; pack; cat $O/env.txt
