#!/usr/bin/env bash
# Weight quantization (--weight-dtype fp8 | int8) on a GPU node: kernel tests, the held-out
# perplexity of the trained model per weight dtype, and llama2_bench_e2e decode/prefill per weight
# dtype on synthetic Llama-2 shapes. One JSON/log per run in OUT_DIR, summary.txt with one line each.
#
#   bash benchmarks/quant/node_quant.sh OUT_DIR [PARTS]
#   PARTS (default "kernels ppl e2e7b"): any of
#     kernels   llama2_gpu_tests for quantization and the GEMV (tests/gpu/test_quant.cu, test_gemv.cu)
#     ppl       perplexity of models/docs-8m, fp16 / bf16 with 16-bit, fp8 and int8 weights, on the
#               whole held-out split when training/corpus/heldout.txt is here (git-ignored: carry
#               it to the node; 167k tokens, ~2 min), else the committed 666-token excerpt, where
#               any change in the fp8 path moves the figure by ~0.5% (RESULTS.md, 2026-12-02 s16)
#     e2e7b     7B batch 1 and 64 (128-token prompts) and a 2048-token prefill, fp16 / fp8 / int8
#     e2e70b    70B batch 1 on ONE GPU with fp8 weights
#     sat13b    13B serve saturation (1024 requests 128+128), fp8 weights + fp8 KV, and fp16 + fp8 KV
#     wquant    tests/reference/gpu_check.sh CHECKS=wquant NPS=1 (HF with the same quantization)
# Environment: SKIP_BUILD=1, REPEATS=3.
set -uo pipefail
OUT=${1:?usage: node_quant.sh OUT_DIR [PARTS]}
PARTS=${2:-"kernels ppl e2e7b"}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
REPEATS=${REPEATS:-3}
has() { [[ " $PARTS " == *" $1 "* ]]; }
note() { echo "$*" | tee -a "$OUT/summary.txt"; }
{ date -u; nvidia-smi -L; git rev-parse HEAD 2>/dev/null; } > "$OUT/env.txt" 2>&1
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
  bash benchmarks/gpu/build.sh llama2 llama2_gpu_tests llama2_bench_e2e llama2_reference_test \
    > "$OUT/build.log" 2>&1 || { note "build FAILED (build.log)"; exit 1; }
fi
mpi() { timeout 600 mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST \
  -x NVSHMEM_DISABLE_NVLS "$@"; }

if has kernels; then
  timeout 300 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc="*quant*,gemv*,Fp8Gemm*" \
    > "$OUT/kernels.log" 2>&1
  note "kernels rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$OUT/kernels.log" | tr '\n' ' ')"
fi

if has ppl; then
  heldout=tests/reference/perplexity/heldout-excerpt.txt
  [[ -f training/corpus/heldout.txt ]] && heldout=training/corpus/heldout.txt
  note "ppl text: $heldout"
  bash benchmarks/accuracy/perplexity_matrix.sh build-gpu/llama2 models/docs-8m \
    "$heldout" "$OUT/ppl" \
    cuda:fp16:auto:1 cuda:fp16:auto:1:fp8 cuda:fp16:auto:1:int8 cuda:bf16:auto:1 \
    cuda:bf16:auto:1:fp8 cuda:bf16:auto:1:int8 > "$OUT/ppl.log" 2>&1
  note "ppl: see ppl/table.md"; cat "$OUT/ppl/table.md" >> "$OUT/summary.txt"
fi

# e2e NAME ARGS...: one llama2_bench_e2e run, its JSON in OUT/NAME.json.
e2e() {
  local name=$1; shift
  mpi -np 1 build-gpu/llama2_bench_e2e --repeats "$REPEATS" --json "$OUT/$name.json" "$@" \
    > "$OUT/$name.log" 2>&1
  local rc=$?
  note "$name rc=$rc $(python3 - "$OUT/$name.json" <<'PY' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))
d = " ".join(f"b{x['batch']}={x['tok_s']:.0f}tok/s" for x in r.get("decode", []))
p = " ".join(f"prefill{x['prompt_len']}={x['ttft_ms']:.1f}ms/{x.get('model_tflops', 0):.0f}TFLOP/s" for x in r.get("prefill", []))
print(r.get("weight_dtype"), d, p)
PY
)"
}
if has e2e7b; then
  for wd in auto fp8 int8; do
    e2e "e2e-7b-$wd" --synthetic 7b --weight-dtype "$wd" --batches 1,64 --prefill-lens 2048
  done
fi
if has e2e70b; then
  e2e e2e-70b-fp8 --synthetic 70b --weight-dtype fp8 --batches 1 --prefill-lens "" \
    --decode-steps 64
fi
if has sat13b; then
  for wd in auto fp8; do
    SKIP_BUILD=1 SYNTHETIC=13b SERVE_ARGS="--kv-cache-dtype fp8 --weight-dtype $wd" \
      bash benchmarks/serve/saturation_ab.sh "$OUT/sat13b-$wd" LLAMA2_MIXED_DECODE 1 \
      > "$OUT/sat13b-$wd.log" 2>&1
    note "sat13b fp8KV weights=$wd rc=$? $(grep -m1 -iE 'generated' "$OUT/sat13b-$wd.log")"
  done
fi
if has wquant; then
  CHECKS=wquant NPS=1 SKIP_BUILD=1 bash tests/reference/gpu_check.sh "$OUT/wquant" > "$OUT/wquant.log" 2>&1
  note "wquant rc=$?"; grep -E '^(RESULT|NOISE|STEP)' "$OUT/wquant/summary.txt" >> "$OUT/summary.txt"
fi
note "done"
