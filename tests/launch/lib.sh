# Shared by the launch tests (sourced): a temporary directory, a clean environment, the paths of
# the launch scripts, and run/expect helpers that keep stdout, stderr and the exit status of each
# named run in $TMP/NAME.{out,err,rc}.
# shellcheck shell=bash disable=SC2034  # the paths are for the scripts that source this
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)  # this file is tests/launch/lib.sh
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
PASSES=0 FAILURES=0
pass() { PASSES=$((PASSES + 1)); echo "ok: $*"; }
fail() { FAILURES=$((FAILURES + 1)); echo "FAIL: $*"; }

# A clean environment: nothing from the caller's shell (env.sh, Slurm, CUDA) leaks in.
for v in $(compgen -e | grep -E '^(NCCL_|LLAMA2_|SLURM_|CUDA_VISIBLE_DEVICES$|CUDA_DEVICE_MAX_CONNECTIONS$|OMP_NUM_THREADS$|NVIDIA_SMI$|TORCH_SYMM_MEM_|NVSHMEM_|MPIRUN$|NVCC$|OMPI_MCA_)'); do
  unset "$v"
done

MPIRUN_SH=$ROOT/launch/llama2-mpirun
RANK_SH=$ROOT/launch/llama2-rank
CHECK=$ROOT/launch/gpu-check.sh
SBATCH=$ROOT/launch/slurm/llama2.sbatch
MAP=$ROOT/launch/slurm/replica_map.sh

# run NAME CMD... : stdout, stderr and exit status to $TMP/NAME.{out,err,rc}
run() {
  local name=$1; shift
  "$@" >"$TMP/$name.out" 2>"$TMP/$name.err"
  echo $? >"$TMP/$name.rc"
}
show() { sed 's/^/    | /' "$TMP/$1.out" "$TMP/$1.err"; }
# runv NAME VARS... -- CMD... : run with VAR=VALUE exported (VAR=-: unset) in a subshell — like
# env(1) without its exec.
runv() {
  local name=$1; shift
  local vars=()
  while [[ "$1" != "--" ]]; do vars+=("$1"); shift; done
  shift
  (
    for v in "${vars[@]}"; do
      if [[ "$v" == *=- ]]; then unset "${v%=-}"; else export "${v?}"; fi
    done
    "$@"
  ) >"$TMP/$name.out" 2>"$TMP/$name.err"
  echo $? >"$TMP/$name.rc"
}
# slurp FILE -> REPLY (no fork: this machine class forks slowly and the suite must stay < 10 s)
slurp() { REPLY=""; IFS= read -r -d '' REPLY <"$1" || true; }
expect_rc() {  # NAME RC
  local got; slurp "$TMP/$1.rc"; got=${REPLY%$'\n'}
  if [[ "$got" == "$2" ]]; then pass "$1: exit $2"; else fail "$1: exit $got, expected $2"; show "$1"; fi
}
expect_out() {  # NAME STRING : stdout contains STRING (fixed string)
  slurp "$TMP/$1.out"
  if [[ "$REPLY" == *"$2"* ]]; then pass "$1: stdout has '$2'"; else fail "$1: stdout lacks '$2'"; show "$1"; fi
}
expect_not_out() {
  slurp "$TMP/$1.out"
  if [[ "$REPLY" != *"$2"* ]]; then pass "$1: stdout has no '$2'"; else fail "$1: stdout has '$2'"; show "$1"; fi
}
expect_err() {
  slurp "$TMP/$1.err"
  if [[ "$REPLY" == *"$2"* ]]; then pass "$1: stderr has '$2'"; else fail "$1: stderr lacks '$2'"; show "$1"; fi
}
expect_eq() {  # LABEL GOT WANT
  if [[ "$2" == "$3" ]]; then pass "$1"; else fail "$1: got '$2', expected '$3'"; fi
}
