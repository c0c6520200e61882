#!/usr/bin/env bash
# Fresh machine to first tokens: install packages, build, make the tiny demo model, then run
# `mpirun -np 2 llama2 generate` on it (two tensor-parallel ranks on the CPU backend).
#   usage: launch/demo.sh ["prompt text"]
set -euo pipefail
source "$(dirname "$0")/env.sh"
"$LLAMA2_ROOT/launch/install-deps.sh"
llama2_build
model="$LLAMA2_BUILD/demo-model"
if [[ ! -f "$model/config.json" ]]; then
  "$LLAMA2_BUILD/llama2" make-test-model --out "$model" --layers 2 --heads 8 --kv-heads 2 --force
fi
prompt=${1:-"Once upon a time in a café in Paris, 一只小猫 🐈 said"}
echo "+ mpirun -np 2 llama2 generate --model $model --prompt \"$prompt\" -n 48 --seed 42"
mpirun --oversubscribe -np 2 -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS \
  "$LLAMA2_BUILD/llama2" generate --model "$model" --prompt "$prompt" -n 48 --seed 42
