#!/usr/bin/env bash
# 4-bit AWQ / GPTQ checkpoints on the CPU backend (issue 37): a test model (make-test-model, hidden
# 512, intermediate 1024: whole groups of 128 at TP 1, 2, 4) written by `llama2 quantize` as AWQ and
# as GPTQ (symmetric v1 in quantize_config.json, act order v2 with groups of 64, one group,
# groups of 32). The engine's logits equal exactly those of the fp32 folder that the Python
# reference dequantizer (tests/reference/dequantize_int4.py: numpy, the formats' formulas) makes
# from the same files, at 1, 2 and 4 ranks; the engine matches transformers on those weights
# (fixtures/int4/, make_int4_fixtures.py) at 1, 2 and 4 ranks; plan counts the 4-bit bytes and
# names the TP degrees that would cut a group; defective files stop every rank with one message.
# The same exact comparison on files written by GPTQModel (tests/models/int4-gptqmodel-*). ~40 s.
#   usage: int4_checkpoint.sh LLAMA2 MODELS LLAMA2_LOGITS_DIFF LLAMA2_REFERENCE_TEST
#   (needs the project's .venv/ with numpy and safetensors)
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
source "$(dirname "${BASH_SOURCE[0]}")/../test_python.sh"
test_python cli.int4_checkpoint numpy safetensors
DIFF=$3
REFTEST=$4
REF=$(cd "$(dirname "${BASH_SOURCE[0]}")/../reference" && pwd)
# The source of make_int4_fixtures.py's fixtures (its SOURCE and RECIPES).
"$LLAMA2" make-test-model --out "$TMP/src" --hidden-size 512 --intermediate-size 1024 --layers 2 \
  --heads 8 --kv-heads 4 --vocab 512 --dtype f16 --tokenizer "$MODELS/tiny-gqa/tokenizer.model" >/dev/null
make_q() {  # make_q NAME QUANTIZE_FLAGS...: $TMP/NAME and the reference's $TMP/NAME-deq
  local name=$1; shift
  if "$LLAMA2" quantize --model "$TMP/src" --out "$TMP/$name" "$@" >"$TMP/$name.q" 2>&1 &&
     "$PY" "$REF/dequantize_int4.py" "$TMP/$name" "$TMP/$name-deq" >>"$TMP/$name.q" 2>&1; then
    pass "quantize $*: $(head -1 "$TMP/$name.q")"
  else fail "quantize $*:"; sed 's/^/    /' "$TMP/$name.q"; fi
}
make_q int4-awq --format awq --group-size 128
make_q int4-gptq-act-order --format gptq --group-size 64 --desc-act --checkpoint-format gptq_v2
make_q gptq-sym-v1 --format gptq --sym --group-size 128 --quantize-config
make_q gptq-one-group --format gptq --sym --group-size -1
make_q gptq-g32 --format gptq --group-size 32

diff_logits() {  # diff_logits NAME NP [DIR]: DIR (default $TMP/NAME) against $TMP/NAME-deq
  "$MPIRUN" "$2" "$DIFF" --model "${3:-$TMP/$1}" --against "$TMP/$1-deq" --tolerance 0 >"$TMP/d.out" 2>&1
  local r; r=$(grep -m1 '^RESULT' "$TMP/d.out")
  if [[ $r == *status=PASS* ]]; then pass "$1 np=$2 == the reference dequantizer's weights: $r"
  else fail "$1 np=$2: $r"; sed 's/^/    /' "$TMP/d.out"; fi
}
for np in 1 2 4; do diff_logits int4-awq $np; diff_logits int4-gptq-act-order $np; done
for name in gptq-sym-v1 gptq-one-group gptq-g32; do diff_logits $name 2; done
# Files the formats' own packer wrote (GPTQModel's GPTQ with act order and its AWQ gemm, from the
# same source: tests/reference/make_int4_packer_fixtures.py); their transformers fixtures are ctest
# reference.int4-gptqmodel-*.
for name in int4-gptqmodel-gptq int4-gptqmodel-awq; do
  if "$PY" "$REF/dequantize_int4.py" "$MODELS/$name" "$TMP/$name-deq" >"$TMP/$name.q" 2>&1; then
    for np in 1 2 4; do diff_logits $name $np "$MODELS/$name"; done
  else fail "$name: the reference dequantizer refused it:"; sed 's/^/    /' "$TMP/$name.q"; fi
done
# The comparison can fail: 4-bit weights are not the 16-bit ones.
"$MPIRUN" 1 "$DIFF" --model "$TMP/int4-awq" --against "$TMP/src" --tolerance 0 >"$TMP/d.out" 2>&1 &&
  fail "int4-awq's logits equal the 16-bit model's" || pass "int4-awq differs from the 16-bit source"

for name in int4-awq int4-gptq-act-order; do
  for np in 1 2 4; do
    "$MPIRUN" $np "$REFTEST" --model "$TMP/$name" --fixture "$REF/fixtures/int4/$name.json" \
      --tolerance 1e-4 >"$TMP/r.out" 2>&1
    r=$(grep -m1 '^RESULT' "$TMP/r.out")
    if [[ $r == *status=PASS* ]]; then pass "$name np=$np vs transformers: ${r#RESULT }"
    else fail "$name np=$np vs transformers: $r"; tail -5 "$TMP/r.out" | sed 's/^/    /'; fi
  done
done
run_capture note 2 generate --model "$TMP/int4-gptq-act-order" --prompt "hello" -n 2
if grep -q "checkpoint 4-bit GPTQ (group 64, asym, desc_act, gptq_v2), dequantized to fp32 at load" \
    "$TMP/note.err"; then pass "start-up report names the 4-bit scheme"
else fail "no 4-bit note in the report:"; sed 's/^/    /' "$TMP/note.err"; fi

# plan: the 4-bit kernels' bytes, and the degrees whose o_proj shard would cut a group of 128 (8 heads of 64:
# TP 8 leaves 64 columns).
"$LLAMA2" plan --model "$TMP/int4-awq" --tp 8 --json >"$TMP/plan.json" 2>&1
python3 - "$TMP/plan.json" <<'PY' && pass "plan: int4 bytes, TP 8 refused naming 1, 2, 4" || fail "plan: $(cat "$TMP/plan.json")"
import json, sys
p = json.load(open(sys.argv[1]))
H, I, L, V, kv = 512, 1024, 2, 512, 256
# As the CUDA 4-bit kernels hold it: half a byte per weight, a 2 x fp16 (scale, bias) pair per
# group and output row (kernels/w4_convert.cuh).
def packed(n, k, g=128): return n * k // 2 + (k // g) * n * 4
layer = packed(H, H) + 2 * packed(kv, H) + packed(H, H) + 2 * packed(I, H) + packed(H, I) + 2 * H * 2
assert p["model_weight_bytes"] == L * layer + (2 * V * H + H) * 2, p["model_weight_bytes"]
assert p["weight_dtype"] == "int4 (awq)" and p["tp_valid"] is False
assert p["valid_tp_degrees"][:4] == [1, 2, 4], p["valid_tp_degrees"]
assert "would cut its 4-bit groups of 128" in p["tp_invalid_reason"], p["tp_invalid_reason"]
PY

# Refusals, one message each, every rank exits.
try() {  # try NAME PATTERN [NP]
  run_capture "$1" "${3:-2}" generate --model "$TMP/$1" --prompt "hello" -n 2
  expect_failure "$1" "$2"
}
"$LLAMA2" quantize --model "$TMP/src" --out "$TMP/g512" --format awq --group-size 512 >/dev/null
try g512 "would cut its 4-bit groups of 512 input rows. Valid tensor-parallel degrees for this model: 1$"
cp -r "$TMP/int4-awq" "$TMP/truncated"
head -c 1000000 "$TMP/int4-awq/model.safetensors" >"$TMP/truncated/model.safetensors"
try truncated "truncated/model.safetensors: truncated"
cp -r "$TMP/int4-awq" "$TMP/packing"
"$PY" - "$TMP/packing/model.safetensors" <<'PY'
import sys
from safetensors.numpy import load_file, save_file
t = load_file(sys.argv[1])
k = "model.layers.1.mlp.up_proj.qweight"
t[k] = t[k].reshape(t[k].shape[0] * 2, -1)  # GPTQ-like rows where AWQ packs columns
save_file(t, sys.argv[1], metadata={"format": "pt"})
PY
try packing "tensor 'model.layers.1.mlp.up_proj.qweight' has shape \[1024, 64\], expected \[512, 128\]"
cp -r "$TMP/int4-awq" "$TMP/groups"
sed -i 's/"group_size": 128/"group_size": 64/' "$TMP/groups/config.json"
try groups "qzeros' has shape \[4, 64\], expected \[8, 64\] (zero points of \[out 512, in 512\], 8 groups of 64)"
cp -r "$TMP/int4-awq" "$TMP/method"
sed -i 's/"quant_method": "awq"/"quant_method": "bitsandbytes"/' "$TMP/method/config.json"
try method 'quant_method "bitsandbytes" is not supported'
cp -r "$TMP/int4-awq" "$TMP/gemv"
sed -i 's/"version": "gemm"/"version": "gemv"/' "$TMP/gemv/config.json"
try gemv 'quantization_config.version "gemv" is not supported'
finish
