# shellcheck shell=bash
# The common part of a device-call script (benchmarks/logs/*/callN.sh): sourced from the repository
# root on a GPU node with $OUT set (the folder whose files come back). After sourcing:
#   - NCCL/torch/NVSHMEM multicast off (exported, and forwarded to every rank by `mpi`), mpirun
#     allowed as root, launch/env.sh sourced;
#   - $O = $OUT/r holds the logs; $O/env.txt starts with the date, the tree and the GPU, and gets
#     one line per step from `note` (with the seconds since sourcing);
#   - pack                 $O as $OUT/all.tgz, so that a call cut off still returns what it had;
#   - note TEXT            a line in env.txt;
#   - node_build TARGET..  tests/gpu/node_build.sh (build-gpu/), noted with its exit status;
#   - gpu_tests [FILTER]   llama2_gpu_tests (every case, or doctest's -tc FILTER), counts and the
#                          failures noted;
#   - mpi ARGS..           mpirun --bind-to none with the multicast variables, under timeout $TL
#                          (default 120 s);
#   - e2e NAME ARGS..      llama2_bench_e2e --synthetic MODEL (default 7b) --prompt-len 128
#                          --decode-steps 64 --repeats 3 ARGS on NP ranks (default 1;
#                          ENVS="-x VAR=V ..." for the ranks' environment), its decode / prefill
#                          lines noted;
#   - ref_check CHECKS     tests/reference/gpu_check.sh at np 1 (CHECKS=fp8kv | wquant | ...) into
#                          $O/CHECKS, its RESULT / NOISE / STEP lines noted, fixtures and logs
#                          removed;
#   - sat NAME VAR VALUES  benchmarks/serve/saturation_ab.sh against build-gpu, one fresh server per
#                          value of VAR (ENV=... in front sets SYNTHETIC, SERVE_ARGS, ...), tok/s
#                          and the step-kind summary noted, the raw step logs removed.
# Every helper returns 0 so that a failed step does not end the call; its status is in env.txt.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
source launch/env.sh >/dev/null 2>&1
O=${OUT:?node_call.sh: set OUT}/r
mkdir -p "$O"
{ date -u; git log --oneline -1; git status --short | head; nvidia-smi -L; } >"$O/env.txt" 2>&1
node_call_t0=$SECONDS

pack() {
  tar czf "$OUT/all.tgz.tmp" -C "$O" . 2>/dev/null && mv "$OUT/all.tgz.tmp" "$OUT/all.tgz"
  return 0
}
note() { echo "$* [$((SECONDS - node_call_t0)) s]" >>"$O/env.txt"; }

node_build() {
  timeout 240 bash tests/gpu/node_build.sh "$@" >"$O/build.log" 2>&1
  note "build rc=$?"
  pack
}

gpu_tests() {
  local filter=()
  [[ $# -gt 0 ]] && filter=(-tc="$1")
  timeout 300 build-gpu/tests/llama2_gpu_tests --force-colors=0 "${filter[@]}" >"$O/gpu_tests.log" 2>&1
  note "gpu tests rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' "$O/gpu_tests.log" | tr '\n' ' ')"
  grep -B2 -A12 "ERROR\|FAILED" "$O/gpu_tests.log" | head -60 >>"$O/env.txt"
  pack
}

mpi() {
  timeout "${TL:-120}" mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST \
    -x NVSHMEM_DISABLE_NVLS "$@"
}

e2e() {
  local name=$1
  shift
  # shellcheck disable=SC2086  # ENVS is a list of -x flags
  mpi -np "${NP:-1}" ${ENVS:-} build-gpu/llama2_bench_e2e --synthetic "${MODEL:-7b}" \
    --prompt-len 128 --decode-steps 64 --repeats 3 "$@" >"$O/$name.log" 2>&1
  note "$name: rc=$? $(grep -E 'batch +[0-9]+:|prefill' "$O/$name.log" | sed 's/ median of 3//' | tr '\n' ' ')"
  return 0
}

ref_check() {
  local checks=$1
  CHECKS=$checks NPS=1 SKIP_BUILD=1 timeout 240 bash tests/reference/gpu_check.sh "$O/$checks" \
    >"$O/$checks.log" 2>&1
  note "reference check $checks rc=$?"
  grep -E "^(RESULT|NOISE|STEP)" "$O/$checks/summary.txt" >>"$O/env.txt"
  rm -rf "$O/$checks/fixtures"* "$O/$checks/logs"
  pack
}

sat() {
  local name=$1 var=$2 values=$3
  SKIP_BUILD=1 timeout 300 bash benchmarks/serve/saturation_ab.sh "$O/$name" "$var" "$values" \
    >"$O/$name.txt" 2>&1
  note "$name rc=$? $(grep -E 'tok/s' "$O/$name.txt" | tr '\n' ' ')"
  local f
  for f in "$O/$name"/*.steps.md; do
    [[ -f $f ]] && { echo "$f"; grep -E '^\| (decode|mixed|prefill) ' "$f"; } >>"$O/env.txt"
  done
  rm -f "$O/$name"/*.steps
  pack
}
