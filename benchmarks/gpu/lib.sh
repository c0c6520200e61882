# shellcheck shell=bash
# The helpers of benchmarks/gpu/run.sh (before: benchmarks/node_call.sh, which the device-call
# scripts benchmarks/logs/*/callN.sh sourced). Sourced from the repository root on a GPU node with
# OUT set (the folder whose files come back from the device call). After sourcing:
#   - NVLink multicast is off: NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
#     NVSHMEM_DISABLE_NVLS=1 exported (and forwarded to every rank by `mpi`); launch/env.sh
#     sourced (mpirun as root allowed, CUDACXX);
#   - $O (WORK, default a new /tmp/llama2-gpu.XXXXXX) holds every log; $O/summary.txt starts with
#     the date, the tree and the GPUs, and gets a line per step from `note`.
# Helpers (each returns the status of what it ran; none ends the call):
#   pack                 $O as $OUT/all.tgz and $O/summary.txt as $OUT/summary.txt, the only files
#                        that come back; run after every step, so a call cut off keeps what it had
#   note TEXT            a line in summary.txt and on stdout, with the seconds since sourcing
#   add [FILE]           FILE (or stdin) to summary.txt and stdout: figures under a step's line
#   limit SECONDS        SECONDS, or what is left of the call's BUDGET_S (default 580) if less
#   logged NAME SECONDS COMMAND..   COMMAND (a program: `env VAR=V prog` for variables) under
#                        timeout SECONDS (cut to the budget), its output in $O/NAME.log,
#                        "NAME rc=N" noted; returns COMMAND's status
#   gpu_build TARGET..   benchmarks/gpu/build.sh into build-gpu/ (BUILD_TL, default 240 s)
#   gpu_tests [FILTER]   llama2_gpu_tests (every case, or doctest's -tc=FILTER); counts, failures
#   mpi ARGS..           "${MPIRUN[@]}" ARGS (mpirun --bind-to none -x <the multicast variables>),
#                        under timeout TL (default 120 s)
#   e2e NAME ARGS..      llama2_bench_e2e --synthetic MODEL (7b) --prompt-len 128 --decode-steps
#                        64 --repeats 3 [--weight-dtype WEIGHT_DTYPE] [--kv-cache-dtype KV_DTYPE]
#                        ARGS at -np NP (1), ENVS ("-x VAR=V ...") for the ranks; later flags in
#                        ARGS win; its decode / prefill lines noted; BUILD_DIR (build-gpu) holds
#                        the binary (another tree's build for a before/after)
#   ref_check CHECKS NP SECONDS   tests/reference/gpu_check.sh (CHECKS, NPS=NP) into $O/CHECKS_npNP;
#                        RESULT / NOISE / STEP lines noted, fixtures and per-run logs removed
#   sat NAME VAR VALUES  benchmarks/serve/saturation_ab.sh: a fresh server per value of VAR, at NP
#                        ranks, SYNTHETIC=MODEL, SERVE_ARGS = the dtype flags + SERVE_ARGS; tok/s
#                        and the step-kind summaries noted, the raw step logs removed; BUILD_DIR
#                        as for e2e, MAX_NEW / REQUESTS as saturation_ab.sh reads them
#   prefix NAME SERVE_ENV   benchmarks/prefix/prefix_ttft.sh (7B) at NP ranks, SERVE_ARGS as for
#                        sat; its summary noted
#   dtype_args FLAGS     "--weight-dtype WEIGHT_DTYPE --kv-cache-dtype KV_DTYPE FLAGS" (those set)
#   tok_s JSON           generated tok/s in a bench_serve.py JSON (0 when unreadable)
# A step's log is $O/NAME.log; the folder a called script writes, $O/NAME.
# shellcheck disable=SC2119,SC2120  # `add` reads stdin here, files in run.sh
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# shellcheck source=launch/env.sh
source launch/env.sh >/dev/null 2>&1
: "${OUT:?benchmarks/gpu/lib.sh: set OUT, the folder whose files come back}"
O=${WORK:-$(mktemp -d /tmp/llama2-gpu.XXXXXX)}
mkdir -p "$O" "$OUT"
BUDGET_S=${BUDGET_S:-580}
lib_t0=$SECONDS
{ date -u; git log --oneline -1; git status --short | head; nvidia-smi -L; } >"$O/summary.txt" 2>&1

pack() {
  cp "$O/summary.txt" "$OUT/summary.txt"
  tar czf "$OUT/all.tgz.tmp" -C "$O" . 2>/dev/null && mv "$OUT/all.tgz.tmp" "$OUT/all.tgz"
  # A file over 16 MiB does not come back.
  if [[ $(stat -c %s "$OUT/all.tgz" 2>/dev/null || echo 0) -gt 15000000 ]]; then
    echo "pack: all.tgz over 15 MB: it may not come back" | tee -a "$O/summary.txt" "$OUT/summary.txt"
  fi
  return 0
}
note() { echo "$* [$((SECONDS - lib_t0)) s]" | tee -a "$O/summary.txt"; }
add() { cat "$@" 2>&1 | tee -a "$O/summary.txt"; }
limit() {
  local left=$((BUDGET_S - (SECONDS - lib_t0)))
  ((left > 0)) || left=1
  echo $(($1 < left ? $1 : left))
}
logged() {
  local name=$1 s=$2 rc
  shift 2
  timeout "$(limit "$s")" "$@" >"$O/$name.log" 2>&1
  rc=$?
  note "$name rc=$rc"
  return "$rc"
}
tok_s() {
  python3 -c 'import json, sys
r = json.load(open(sys.argv[1]))["results"]
r = r[0] if isinstance(r, list) else r
print(round(r["generated_tok_s"]))' "$1" 2>/dev/null || echo 0
}

gpu_build() {
  note "build targets: $*"
  logged build "${BUILD_TL:-240}" bash benchmarks/gpu/build.sh "$@"
  local rc=$?
  ((rc == 0)) || tail -30 "$O/build.log" | add
  pack
  return "$rc"
}

gpu_tests() {
  local name=gpu_tests filter=() rc
  if [[ -n ${1:-} ]]; then
    filter=(-tc="$1")
    name=gpu_tests_${1//[^A-Za-z0-9_.-]/_}
  fi
  logged "$name" 300 build-gpu/tests/llama2_gpu_tests --force-colors=0 "${filter[@]}"
  rc=$?
  grep -E '^\[doctest\] (test cases|assertions)' "$O/$name.log" | add
  grep -B2 -A12 "ERROR\|FAILED" "$O/$name.log" | head -60 | add
  pack
  return "$rc"
}

MPIRUN=(mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST
        -x NVSHMEM_DISABLE_NVLS)
mpi() { timeout "$(limit "${TL:-120}")" "${MPIRUN[@]}" "$@"; }

e2e() {
  local name=$1 tl=${TL:-120} dtypes=() rc
  shift
  [[ ${MODEL:-7b} == 70b ]] && tl=${TL:-300}
  [[ -n ${WEIGHT_DTYPE:-} ]] && dtypes+=(--weight-dtype "$WEIGHT_DTYPE")
  [[ -n ${KV_DTYPE:-} ]] && dtypes+=(--kv-cache-dtype "$KV_DTYPE")
  # shellcheck disable=SC2086  # ENVS is a list of -x flags
  TL=$tl mpi -np "${NP:-1}" ${ENVS:-} "${BUILD_DIR:-build-gpu}/llama2_bench_e2e" --synthetic "${MODEL:-7b}" \
    --prompt-len 128 --decode-steps 64 --repeats 3 "${dtypes[@]}" "$@" >"$O/$name.log" 2>&1
  rc=$?
  note "$name: rc=$rc $(grep -E 'batch +[0-9]+[:,]|prefill' "$O/$name.log" | sed 's/ median of 3//' | tr '\n' ' ')"
  return "$rc"
}

ref_check() {
  local name=$1_np$2 rc
  logged "$name" "$3" env CHECKS="$1" NPS="$2" SKIP_BUILD=1 bash tests/reference/gpu_check.sh "$O/$name"
  rc=$?
  grep -E "^(RESULT|NOISE|STEP|INT4-SAME)" "$O/$name/summary.txt" 2>&1 | add
  # The logs stay (all.tgz): a failed run's reason is in them. The fixtures are large.
  rm -rf "$O/$name/fixtures"*
  pack
  return "$rc"
}

# The dtype flags of `serve` / `batch`, then $1 (more flags).
dtype_args() { echo "${WEIGHT_DTYPE:+--weight-dtype $WEIGHT_DTYPE }${KV_DTYPE:+--kv-cache-dtype $KV_DTYPE }$1"; }

sat() {
  local name=$1 n rc f
  n=$(wc -w <<<"$3")
  logged "$name" $((150 + 150 * n)) env NP="${NP:-1}" SYNTHETIC="${MODEL:-7b}" SKIP_BUILD=1 \
    BUILD_DIR="${BUILD_DIR:-build-gpu}" \
    SERVE_ARGS="$(dtype_args "${SERVE_ARGS:-}")" bash benchmarks/serve/saturation_ab.sh "$O/$name" "$2" "$3"
  rc=$?
  grep -E 'tok/s' "$O/$name.log" | add
  for f in "$O/$name"/*.steps.md; do
    [[ -f $f ]] && { echo "${f#"$O"/}"; grep -E '^\| (decode|mixed|prefill) ' "$f"; } | add
  done
  rm -f "$O/$name"/*.steps
  pack
  return "$rc"
}

prefix() {
  logged "$1" 240 env NP="${NP:-1}" SKIP_BUILD=1 SERVE_ENV="$2" SERVE_ARGS="$(dtype_args "${SERVE_ARGS:-}")" \
    bash benchmarks/prefix/prefix_ttft.sh "$O/$1"
  local rc=$?
  head -4 "$O/$1/summary.txt" 2>&1 | add
  pack
  return "$rc"
}
