#!/usr/bin/env bash
# launch/llama2-mpirun behind mpirun.sh's calling convention, for tests that start a job the way
# users do (the supervising wrapper ends a job whose rank died in bounded time; plain mpirun sits
# out its kill sequence):   wrapper_np.sh NP LLAMA2_BINARY ARGS...
#   (LLAMA2_TEST_TIMEOUT seconds, default 120)
set -u
np=$1 bin=$2
shift 2
export OMPI_MCA_btl_vader_single_copy_mechanism=none
LLAMA2_BIN=$bin exec timeout --kill-after=5 "${LLAMA2_TEST_TIMEOUT:-120}" \
  "$(dirname "$0")/../../launch/llama2-mpirun" -n "$np" -q -- "$@"
