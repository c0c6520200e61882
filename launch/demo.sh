#!/usr/bin/env bash
# Fresh machine to first tokens: install packages, build, then run `mpirun -np 2 llama2 generate`
# (two tensor-parallel ranks on the CPU backend) on the project's trained model, models/docs-8m: a
# 7.9M-parameter Llama trained on software documentation (models/docs-8m/README.md), so the text
# reads like documentation.
#   usage: launch/demo.sh ["prompt text"]
#   DEMO_SKIP_SETUP=1 skips installing and building (tests use it; LLAMA2_BUILD names the build).
set -euo pipefail
source "$(dirname "$0")/env.sh"
if [[ "${DEMO_SKIP_SETUP:-0}" != 1 ]]; then
  "$LLAMA2_ROOT/launch/install-deps.sh"
  llama2_build
fi
model="$LLAMA2_ROOT/models/docs-8m"
prompt=${1:-"The database server"}
flags=(-n 64 --temperature 0.7 --top-p 0.9 --repetition-penalty 1.15 --seed 42 --backend cpu)
echo "+ mpirun -np 2 llama2 generate --model $model --prompt \"$prompt\" ${flags[*]}"
mpirun --oversubscribe -np 2 -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS \
  "$LLAMA2_BUILD/llama2" generate --model "$model" --prompt "$prompt" "${flags[@]}"
