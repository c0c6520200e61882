# Session 16, call 4 (main 61225ff, bf16 sums): is the fp8 products' bf16 rounding of their sums
# visible on trained weights? Held-out perplexity of models/docs-8m on the whole held-out split
# (training/corpus/heldout.txt, 167,773 tokens, carried to the node) with fp8 weights, fp16 and bf16
# activations, in the default build (bf16 sums) and a -DLLAMA2_FP8_SUMS_FP32=1 build (fp32 sums);
# fp16-weight rows beside (the sums do not touch them).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source launch/env.sh >/dev/null 2>&1
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/all.tgz.tmp -C $O . 2>/dev/null && mv $OUT/all.tgz.tmp $OUT/all.tgz; }
{ date -u; git log --oneline -1; git status --short | head; nvidia-smi -L; wc -c training/corpus/heldout.txt; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 200 bash tests/gpu/node_build.sh llama2 > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
( cmake -S . -B build-gpu-fp32 -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA2_WERROR=ON \
  -DCMAKE_CUDA_FLAGS=-DLLAMA2_FP8_SUMS_FP32=1 -DCMAKE_CXX_FLAGS=-DLLAMA2_FP8_SUMS_FP32=1 > $O/build_fp32.log 2>&1 &&
  nice ninja -C build-gpu-fp32 llama2 2>&1 | grep -vE "^\[[0-9]+/[0-9]+\] " >> $O/build_fp32.log; echo "fp32 build rc=${PIPESTATUS[0]}" >> $O/build_fp32.log ) &
bpid=$!
H=training/corpus/heldout.txt
timeout 300 bash benchmarks/accuracy/perplexity_matrix.sh build-gpu/llama2 models/docs-8m $H $O/ppl_bf16sums \
  cuda:fp16:auto:1 cuda:fp16:auto:1:fp8 cuda:bf16:auto:1 cuda:bf16:auto:1:fp8 > $O/ppl_bf16sums.log 2>&1
echo "ppl bf16 sums rc=$? $((SECONDS-t0)) s" >> $O/env.txt; cat $O/ppl_bf16sums/table.md >> $O/env.txt; pack
wait $bpid; echo "$(tail -1 $O/build_fp32.log) $((SECONDS-t0)) s" >> $O/env.txt
timeout 200 bash benchmarks/accuracy/perplexity_matrix.sh build-gpu-fp32/llama2 models/docs-8m $H $O/ppl_fp32sums \
  cuda:fp16:auto:1 cuda:fp16:auto:1:fp8 cuda:bf16:auto:1:fp8 > $O/ppl_fp32sums.log 2>&1
echo "ppl fp32 sums rc=$? $((SECONDS-t0)) s" >> $O/env.txt; cat $O/ppl_fp32sums/table.md >> $O/env.txt
date -u >> $O/env.txt; pack; cat $O/env.txt
