#!/usr/bin/env bash
# The trained model's GPU-node run, in one go (models/docs-8m/README.md): train on one H200, then
# the Hugging Face reference fixtures (CPU fp32) and reference perplexities of the new model.
#   usage: bash training/node_train.sh OUTDIR      (from the repository root, with training/corpus
#          holding train.bin / heldout.bin / heldout.txt from training/build_corpus.py)
# Logs and results go to OUTDIR; the model to models/docs-8m.
set -uo pipefail
out=${1:?usage: node_train.sh OUTDIR}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
MODEL=models/docs-8m
{
  date -u
  nvidia-smi -L
  python3 -c 'import torch, transformers, sentencepiece; print("torch", torch.__version__, "transformers", transformers.__version__, "sentencepiece", sentencepiece.__version__)'
} 2>&1 | tee "$out/env.txt"

echo "+ python3 training/train.py --data training/corpus --tokenizer $MODEL/tokenizer.model --out $MODEL --steps ${STEPS:-auto} --time-budget ${BUDGET:-180}" | tee "$out/train.log"
python3 training/train.py --data training/corpus --tokenizer "$MODEL/tokenizer.model" --out "$MODEL" \
  --steps "${STEPS:-auto}" --time-budget "${BUDGET:-180}" 2>&1 | tee -a "$out/train.log" || exit 1

# HF fixtures of the trained model (CPU fp32, the committed kind) and the reference perplexities.
python3 tests/reference/make_fixtures.py --models models --only docs-8m \
  --out "$out/fixtures" 2>&1 | tee "$out/fixtures.log"
python3 tests/reference/perplexity_reference.py --model "$MODEL" \
  --text-file tests/reference/perplexity/heldout-excerpt.txt \
  --config max:max --config 128:64 --config 100:37 --config 64:64 \
  --out "$out/ppl-excerpt.json" 2>&1 | tee "$out/ppl.log"
python3 tests/reference/perplexity_reference.py --model "$MODEL" --text-file training/corpus/heldout.txt \
  --config max:max --out "$out/ppl-heldout-fp32.json" 2>&1 | tee -a "$out/ppl.log"
# HF's own fp16 / bf16 held-out perplexity on the GPU, for comparison with the engine's.
for dt in float16 bfloat16; do
  python3 tests/reference/perplexity_reference.py --model "$MODEL" --text-file training/corpus/heldout.txt \
    --dtype $dt --device cuda --out "$out/ppl-heldout-$dt-cuda.json" 2>&1 | tee -a "$out/ppl.log"
done
