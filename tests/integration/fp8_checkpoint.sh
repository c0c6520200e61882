#!/usr/bin/env bash
# FP8 checkpoints (issue 20): `llama2 convert-fp8` writes tiny-f16's projections as F8_E4M3 with
# weight_scale tensors, plus an F32 twin holding the dequantized weights (scale * e4m3). On the
# CPU backend the FP8 file must give exactly the twin's logits at 1 and 2 ranks, for per-channel and
# per-tensor scales in both config formats (compressed-tensors and quant_method "fp8", with static
# input scales that are ignored); `plan` and the start-up report name the checkpoint's fp8; each
# bad file is refused with one message naming the tensor or field. About 25 s on the 2-core CI VM.
#   usage: fp8_checkpoint.sh LLAMA2 MODELS LLAMA2_LOGITS_DIFF
source "$(dirname "$0")/lib.sh" "$@"
DIFF=$3
CORRUPT="python3 $(dirname "$0")/corrupt_model.py"
SRC=$MODELS/tiny-f16

convert() {  # convert NAME ARGS... -> $TMP/NAME (FP8) and $TMP/NAME-deq (F32 twin)
  local name=$1; shift
  if "$LLAMA2" convert-fp8 --model "$SRC" --out "$TMP/$name" --dequantized-out "$TMP/$name-deq" \
      "$@" >"$TMP/$name.convert" 2>&1; then
    pass "convert-fp8 $*: $(head -1 "$TMP/$name.convert")"
  else
    fail "convert-fp8 $* failed:"; sed 's/^/    /' "$TMP/$name.convert"
  fi
}
convert channel --scales channel                     # compressed-tensors, weight_scale [out, 1]
convert tensor --scales tensor --format fp8 --static-input-scales  # fp8, scalar scales
convert channel_fp8 --scales channel --format fp8    # fp8, weight_scale [out]
convert tensor_ct --scales tensor                    # compressed-tensors, weight_scale [1]

diff_logits() {  # diff_logits NAME NP EXPECT(0|1) ARGS...
  local name=$1 np=$2 want=$3; shift 3
  "$MPIRUN" "$np" "$DIFF" "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
  local rc=$?
  local result; result=$(grep -m1 '^RESULT' "$TMP/$name.out")
  if [[ $rc -eq $want && -n $result ]]; then pass "$name: $result"
  else fail "$name: exit $rc (want $want)"; sed 's/^/    /' "$TMP/$name.out" "$TMP/$name.err"; fi
}
for np in 1 2; do
  diff_logits "channel.np$np" $np 0 --model "$TMP/channel" --against "$TMP/channel-deq" --tolerance 0
done
diff_logits tensor.np2 2 0 --model "$TMP/tensor" --against "$TMP/tensor-deq" --tolerance 0
diff_logits channel_fp8.np2 2 0 --model "$TMP/channel_fp8" --against "$TMP/channel_fp8-deq" --tolerance 0
diff_logits tensor_ct.np1 1 0 --model "$TMP/tensor_ct" --against "$TMP/tensor_ct-deq" --tolerance 0
# The comparison can fail: the FP8 weights are not the 16-bit ones, so the logits differ.
diff_logits fp8_vs_f16 1 1 --model "$TMP/channel" --against "$SRC" --tolerance 0
# fp8 was read as stored and dequantized, per channel: the report says so.
if grep -q "checkpoint fp8 e4m3 (compressed-tensors)" "$TMP/channel.np2.out"; then
  pass "start-up report names the checkpoint's fp8"
else
  fail "no checkpoint note in the start-up report:"; sed 's/^/    /' "$TMP/channel.np2.out"
fi
if grep -q "(fp8, static activation scales): 14 input_scale tensors not used" "$TMP/tensor.np2.out"; then
  pass "static input scales: accepted and reported as not used"
else
  fail "no note about the ignored input scales:"; sed 's/^/    /' "$TMP/tensor.np2.out"
fi

# plan on an FP8 checkpoint counts 1-byte projections without --weight-dtype.
"$LLAMA2" plan --model "$TMP/channel" --json >"$TMP/plan.out" 2>&1
if grep -q '"weight_dtype":"fp8_e4m3"' "$TMP/plan.out" && grep -q '"checkpoint_quantization"' "$TMP/plan.out"; then
  pass "plan: fp8_e4m3 projections from the checkpoint"
else
  fail "plan did not report fp8:"; sed 's/^/    /' "$TMP/plan.out"
fi

# Bad files: one clear message each, every rank exits.
fresh() { rm -rf "$TMP/$1"; cp -r "$TMP/$2" "$TMP/$1"; }
try() {  # try NAME PATTERN [generate flags]
  local name=$1 pattern=$2; shift 2
  run_capture "$name" 2 generate --model "$TMP/$name" --prompt "hello" -n 2 "$@"
  expect_failure "$name" "$pattern"
}
set_config() {  # set_config DIR PYTHON_EXPR_ON_q (q = quantization_config)
  python3 - "$TMP/$1/config.json" "$2" <<'PY'
import json, sys
path, expr = sys.argv[1], sys.argv[2]
c = json.load(open(path))
q = c.get("quantization_config")
exec(expr)
json.dump(c, open(path, "w"), indent=2)
PY
}
fresh no_scale channel
$CORRUPT "$TMP/no_scale/model.safetensors" drop-tensor model.layers.0.self_attn.q_proj.weight_scale
try no_scale "its scale 'model.layers.0.self_attn.q_proj.weight_scale' is missing"
fresh e5m2 channel
$CORRUPT "$TMP/e5m2/model.safetensors" set-dtype model.layers.1.mlp.down_proj.weight F8_E5M2
try e5m2 "'model.layers.1.mlp.down_proj.weight' has dtype F8_E5M2"
fresh bad_scale_shape tensor_ct
$CORRUPT "$TMP/bad_scale_shape/model.safetensors" set-shape model.layers.1.mlp.up_proj.weight_scale '[1, 1]'
try bad_scale_shape "up_proj.weight_scale' has shape \[1, 1\]; allowed: \[\] or \[1\]"
fresh block_wise tensor
set_config block_wise 'q["weight_block_size"] = [128, 128]'
try block_wise 'quantization_config.weight_block_size \[128,128\] is not supported'
fresh bnb channel
set_config bnb 'q["quant_method"] = "bitsandbytes"'
try bnb 'quantization_config.quant_method "bitsandbytes" is not supported'
fresh no_qconfig channel
set_config no_qconfig 'del c["quantization_config"]'
try no_qconfig "is F8_E4M3 but config.json has no quantization_config"
fresh cpu_fp8 channel
try cpu_fp8 "weight-dtype fp8_e4m3 needs the cuda backend" --backend cpu --weight-dtype fp8
finish
