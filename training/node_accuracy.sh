#!/usr/bin/env bash
# The second GPU-node run of the trained model (models/docs-8m/README.md): build, train the final
# model (a fixed step count), its reference fixtures and perplexities, then the CUDA checks and
# the accuracy rows of benchmarks/RESULTS.md.
#   usage: bash training/node_accuracy.sh OUTDIR    (repository root, training/corpus present)
#   SKIP_TRAIN=1: keep the committed model and its committed fixture; only build and measure.
set -uo pipefail
out=${1:?usage: node_accuracy.sh OUTDIR}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
t0=$SECONDS
if ! bash benchmarks/gpu/build.sh llama2 llama2_reference_test llama2_gpu_tests > "$out/build.log" 2>&1; then
  tail -n 60 "$out/build.log"; exit 1
fi
echo "build: $((SECONDS - t0)) s" | tee -a "$out/build.log"
fixture=tests/reference/fixtures/docs-8m.json
if [[ ${SKIP_TRAIN:-0} != 1 ]]; then
  STEPS=${STEPS:-1300} bash training/node_train.sh "$out/train" || exit 1
  fixture=$out/train/fixtures/docs-8m.json
fi
build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc="slice log-sum-exp*" 2>&1 | tee "$out/gpu_test.log"
for dt in fp32 fp16 bf16; do
  tol=1e-3
  [[ $dt != fp32 ]] && tol=0.5  # a sanity bound only: the dtype checks are gpu_check.sh's job
  timeout 300 mpirun -np 1 -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS \
    build-gpu/tests/llama2_reference_test --model models/docs-8m --fixture "$fixture" \
    --backend cuda --dtype $dt --tolerance $tol --near-tie $tol 2>&1 | tail -n 3 | tee -a "$out/ref_cuda.log"
done
bash benchmarks/accuracy/perplexity_matrix.sh build-gpu/llama2 models/docs-8m \
  tests/reference/perplexity/heldout-excerpt.txt "$out/excerpt" cuda:fp32:auto:1 cpu:fp32:auto:1 2>&1 | tee "$out/excerpt.log"
bash benchmarks/accuracy/perplexity_matrix.sh build-gpu/llama2 models/docs-8m training/corpus/heldout.txt \
  "$out/heldout" cpu:fp32:auto:1 cpu:fp32:auto:2 cuda:fp32:auto:1 cuda:fp16:auto:1 cuda:bf16:auto:1 \
  cuda:fp16:fp8:1 cuda:bf16:fp8:1 2>&1 | tee "$out/heldout.log"
echo "total: $((SECONDS - t0)) s"
