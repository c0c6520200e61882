#!/usr/bin/env bash
# mpirun for tests: N ranks, oversubscription allowed (CI has 2 cores), root allowed (CI runs as
# root), and a hard per-run time limit so that a hang fails the test instead of stalling CI.
#   usage: mpirun.sh NP PROGRAM [ARGS...]      (LLAMA2_TEST_TIMEOUT seconds, default 120)
set -u
np=$1; shift
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Quiet Open MPI's own chatter and keep it off network interfaces CI may not have.
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
exec timeout --kill-after=10 "${LLAMA2_TEST_TIMEOUT:-120}" \
  mpirun --oversubscribe -np "$np" "$@"
