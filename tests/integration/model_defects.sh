#!/usr/bin/env bash
# Each model-file defect: one clear message naming the file (and tensor), non-zero exit of every
# rank within the time limit (mpirun.sh kills a hang), under 2 ranks.
source "$(dirname "$0")/lib.sh" "$@"
CORRUPT="python3 $(dirname "$0")/corrupt_model.py"

fresh() {  # fresh NAME SOURCE_MODEL -> copy in $TMP/NAME
  rm -rf "$TMP/$1"; cp -r "$MODELS/$2" "$TMP/$1"
}
try() {  # try NAME PATTERN
  run_capture "$1" 2 generate --model "$TMP/$1" --prompt "hello" -n 4
  expect_failure "$1" "$2"
}

fresh no_config tiny-mha; rm "$TMP/no_config/config.json"
try no_config "no_config/config.json: cannot open"

fresh bad_config tiny-mha; echo '{"hidden_size": 64,' >"$TMP/bad_config/config.json"
try bad_config "bad_config/config.json: not valid JSON"

fresh no_weights tiny-mha; rm "$TMP/no_weights/model.safetensors"
try no_weights "neither model.safetensors, model.safetensors.index.json, pytorch_model.bin nor"

fresh no_tokenizer tiny-mha; rm "$TMP/no_tokenizer/tokenizer.model"
try no_tokenizer "no_tokenizer/tokenizer.model"

fresh truncated tiny-mha; $CORRUPT "$TMP/truncated/model.safetensors" truncate 300000
try truncated "truncated/model.safetensors.*truncated"

fresh short tiny-mha; $CORRUPT "$TMP/short/model.safetensors" truncate 5
try short "short/model.safetensors"

fresh garbled tiny-mha; $CORRUPT "$TMP/garbled/model.safetensors" garble-header
try garbled "garbled/model.safetensors.*JSON"

fresh missing_tensor tiny-mha; $CORRUPT "$TMP/missing_tensor/model.safetensors" drop-tensor model.layers.1.mlp.up_proj.weight
try missing_tensor "'model.layers.1.mlp.up_proj.weight' not found"

fresh bad_dtype tiny-mha; $CORRUPT "$TMP/bad_dtype/model.safetensors" set-dtype model.layers.0.self_attn.k_proj.weight I32
try bad_dtype "model.layers.0.self_attn.k_proj.weight.*I32"

fresh wrong_shape tiny-mha; sed -i 's/"intermediate_size": 172/"intermediate_size": 100/' "$TMP/wrong_shape/config.json"
try wrong_shape "model.layers.0.mlp.gate_proj.weight.*shape \[172, 64\].*expected \[100, 64\]"

fresh missing_shard tiny-gqa; rm "$TMP/missing_shard/model-00002-of-00002.safetensors"
try missing_shard "model-00002-of-00002.safetensors"

fresh bad_index tiny-gqa; echo 'not json' >"$TMP/missing_shard/model.safetensors.index.json"; echo '[' >"$TMP/bad_index/model.safetensors.index.json"
try bad_index "bad_index/model.safetensors.index.json"
finish
