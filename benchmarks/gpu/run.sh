#!/usr/bin/env bash
# The measurements of benchmarks/RESULTS.md on a GPU node, one device call: named steps, run in
# the order given, from the repository root, with $OUT set (the folder whose files come back).
#
#   bash benchmarks/gpu/run.sh STEP[:ARG] [STEP[:ARG]...]
#   e.g. bash benchmarks/gpu/run.sh build gpu-tests e2e-batch1 e2e-batch64 prefill saturation
#        KV_DTYPE=fp8 bash benchmarks/gpu/run.sh build saturation:LLAMA2_FP8_TUNE=0,1
#
# Steps (benchmarks/README.md says which figure each gives; ":VAR=a,b" runs the step once per value
# with -x VAR=value on every rank, ROUNDS times, alternating):
#   build[:T1,T2]           benchmarks/gpu/build.sh (-DLLAMA2_WERROR=ON, build-gpu/) of the targets
#                           the other steps need (or T1,T2; alone: everything); if it fails,
#                           nothing after it runs
#   node-check              launch/gpu-check.sh [--tp NP] --preset MODEL: GPUs, driver, topology
#   gpu-tests[:FILTER]      llama2_gpu_tests, every case or doctest's -tc=FILTER
#   ref-check:CHECKS        tests/reference/gpu_check.sh CHECKS=all|fp8kv|wquant|logprobs|int4 at NP
#   e2e-batch1[:VAR=a,b]    llama2_bench_e2e decode, batch 1
#   e2e-batch64[:VAR=a,b]   decode, batch 64
#   e2e-sweep[:VAR=a,b]     decode at BATCHES (1,16,32,64,128), prefill at PREFILL_LENS (512,2048)
#   prefill[:VAR=a,b]       prefill of PREFILL_LENS (2048) tokens, median of 5
#   op-profile[:B|prefill]  LLAMA2_OP_PROFILE=1 (eager, per-op ms): 3 decode steps at batch B (64),
#                           or one prefill of PREFILL_LENS
#   e2e-matrix              benchmarks/e2e/run.sh: MODELS x TPS (7b 13b 70b x 1 2, what fits)
#   saturation[:VAR=a,b]    serve, 1024 requests of 128 + 128 at once (saturation_ab.sh)
#   batch-offline           `llama2 batch`, 1024 prompts of 128 + 128 (batch_offline.sh), one GPU
#   rope-check              rope_scaling on CUDA against the CPU backend (rope_check.sh)
#   constrained-ab          structured output's cost at batch 64: 64 requests of 128 + 256 at once,
#                           unconstrained, then every one constrained (CONSTRAINT, a JSON object of
#                           request fields; default a regex of lowercase words), ROUNDS times, over
#                           the 32,000-piece vocabulary of benchmarks/cpu/constrain_tokenizer.sh
#   verify-cost             speculative verification's step cost: llama2_bench_e2e --verify-lens
#                           1,2,4,8,16 at VERIFY_BATCHES (1) (WEIGHT_DTYPE / KV_DTYPE apply)
#   spec-ab                 serve at batch 64 (64 requests of 128 + 256 at once) without and with
#                           SPEC (--speculative ngram:4): what speculation costs where it is switched
#                           off per step (--speculative-max-batch), ROUNDS times
#   access-log-ab           http-vs-socket saturation twice, --access-log off then json (HTTP / socket
#                           in each server, so node drift cancels), and the n = 4 vs n = 1 request
#   logits-adjust-cuda      llama2_logits_adjust_test --backend cuda on small-d64: masked and
#                           biased rows against the adjustment applied to full logits
#   deterministic-cuda      --deterministic's tests on the GPU: llama2_gpu_tests' invariant cases,
#                           then llama2_deterministic_test --backend cuda (the ctest entries
#                           deterministic.cuda.*) on small-d64 fp16, small-d64-bf16 and
#                           small-d128-f16 at NP ranks, and the 7B shape (synthetic, 4 prompts);
#                           cli.deterministic_batch's `llama2 batch` on cuda (small-d64 fp16)
#   deterministic-ab        --deterministic's cost: llama2_bench_e2e batch 1, batch 64 and prefill
#                           of PREFILL_LENS (2048), without and with the flag, ROUNDS times
#   deterministic-sat       the same for serve saturation (saturation_ab.sh, SERVE_ARGS + the flag)
#   cpu-before-after:DIR    benchmarks/cpu_batch_throughput.sh on this node's CPUs, DIR's build
#                           (see before-after) and this tree's, ROUNDS times, alternating
#   before-after:DIR        a restructuring's perf guard against the older tree in DIR (carried;
#                           `git archive BASE | tar -x -C DIR`, built here into DIR/build-gpu):
#                           ROUNDS rounds, each side in turn: e2e batch 1, saturation (128 + 128),
#                           and long requests (256 requests of 128 + 896 under --max-seq-len 1024:
#                           what a request without max_tokens costs when admission counts
#                           prompt + max_new_tokens)
#   prefix-ttft             a 1,024-token cached prefix + 32-token suffix (prefix_ttft.sh)
#   prefix-split            prefix-ttft with the prefill key split (default) and LLAMA2_PREFILL_SPLIT=0
#   http-vs-socket          benchmarks/http/gpu_http_vs_socket.sh (needs .httplib/ carried)
#   kernels[:NAME]          llama2_bench_kernels [decode|prefill|qgemv|w4|w8a16|fp8|overlap|skinny]
#   perplexity              held-out perplexity of models/docs-8m (perplexity_matrix.sh, PPL_ROWS)
#   watchdog                llama2_watchdog_test hook cuda: a stalled step at TP 1
#   soak                    llama2_serve_soak, 10,000 requests at NP ranks: RSS, fds, GPU memory
#   fp8-checkpoint          benchmarks/gpu/fp8_checkpoint.sh (FP8 files vs quantized at load)
#   two-gpu-allreduce       llama2_bench_allreduce at -np 2: one-shot vs NCCL, fused + RMSNorm
#   two-gpu-7b              7B batch 1,8,64: TP 1, TP 2 with LLAMA2_FUSE_ALLREDUCE_NORM 0 / 1
#   two-gpu-70b             70B batch 1,8 at TP 2, fp16 and fp8 weights
#   two-gpu-saturation      serve saturation TP 1, TP 2, DP 2 (-np 2 --tp 1)
#   two-gpu-ref-check[:CHECKS]  tests/reference/gpu_check.sh at np 2 (fp8kv; all)
#   two-gpu-kill            rank 1 SIGSTOPped / SIGKILLed mid-stream at TP 2, under
#                           tests/integration/mpirun.sh and launch/llama2-mpirun (LAUNCHERS)
#   two-gpu-soak            soak at TP 2
#   two-gpu-prefix-split    prefix-split at TP 2
# Environment: MODEL=7b (13b, 70b), NP=1 (ranks), WEIGHT_DTYPE (fp8, int8; unset: the model's),
# KV_DTYPE (fp8), ENVS ("-x VAR=V ..." for the e2e ranks), ROUNDS=1 (2 for two-gpu-7b), BATCHES,
# PREFILL_LENS, SERVE_ARGS (more `serve` flags), PPL_ROWS, LAUNCHERS="mpirun wrapper",
# BUDGET_S=580 (seconds for the whole call: a step that would start later is reported as not run,
# and every time limit is cut to what is left), BUILD_TL=240, WORK (the log folder), and what the
# called scripts read (MAX_BATCH, PREFILL_CHUNK, REQUESTS, TRIALS, SATURATION_ONLY, ...). The
# two-gpu-* steps run the prepared commands as they are: MODEL, NP, the dtypes and ENVS do not
# apply to them.
# Writes $OUT/summary.txt (a line per step: status, figures, seconds) and $OUT/all.tgz (every log),
# both after each step. Exit status: 0 when every step passed, 1 otherwise, 2 for a bad step name.
# shellcheck disable=SC2317  # the step_* functions are called by name
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2

# The build-gpu/ targets each step needs.
targets() {
  case $1 in
    build) ;;
    node-check | saturation | batch-offline | prefix-ttft | prefix-split | http-vs-socket | \
      perplexity | two-gpu-saturation | two-gpu-prefix-split) echo llama2 ;;
    gpu-tests) echo llama2_gpu_tests ;;
    ref-check | two-gpu-ref-check) echo llama2 llama2_reference_test llama2_gpu_tests llama2_logits_diff ;;
    e2e-matrix | before-after) echo llama2 llama2_bench_e2e ;;
    cpu-before-after) echo llama2 llama2_bench_cpu ;;
    rope-check) echo llama2_logits_diff ;;
    constrained-ab | spec-ab | access-log-ab) echo llama2 ;;
    verify-cost) echo llama2_bench_e2e ;;
    logits-adjust-cuda) echo llama2_logits_adjust_test ;;
    deterministic-cuda) echo llama2 llama2_gpu_tests llama2_deterministic_test ;;
    deterministic-ab) echo llama2_bench_e2e ;;
    deterministic-sat) echo llama2 ;;
    e2e-batch1 | e2e-batch64 | e2e-sweep | prefill | op-profile | two-gpu-7b | two-gpu-70b)
      echo llama2_bench_e2e ;;
    kernels) echo llama2_bench_kernels ;;
    watchdog | two-gpu-kill) echo llama2 llama2_watchdog_test ;;
    soak | two-gpu-soak) echo llama2 llama2_serve_soak ;;
    fp8-checkpoint) echo llama2 llama2_logits_diff llama2_gpu_tests ;;
    two-gpu-allreduce) echo llama2_bench_allreduce ;;
    *) return 1 ;;
  esac
}

# check STEP ARG: why the step cannot run as asked (nothing when it can).
check() {
  local name=$1 arg=$2
  targets "$name" >/dev/null || { echo "unknown step '$name'"; return; }
  case $name in
    ref-check) [[ $arg =~ ^(all|fp8kv|wquant|logprobs|int4)$ ]] || echo "ref-check:CHECKS, CHECKS = all, fp8kv, wquant, logprobs or int4" ;;
    two-gpu-ref-check) [[ $arg =~ ^(|all|fp8kv|wquant|logprobs|int4)$ ]] || echo "CHECKS = all, fp8kv, wquant, logprobs or int4" ;;
    e2e-batch1 | e2e-batch64 | e2e-sweep | prefill | saturation)
      [[ -z $arg || $arg =~ ^[A-Za-z_][A-Za-z0-9_]*=[^,]+(,[^,]+)*$ ]] || echo "$name:VAR=a,b expected" ;;
    op-profile) [[ $arg =~ ^([0-9]*|prefill)$ ]] || echo "op-profile:BATCH or op-profile:prefill" ;;
    kernels) [[ $arg =~ ^(|decode|prefill|qgemv|w4|w8a16|fp8|overlap|skinny)$ ]] || echo "unknown kernels '$arg'" ;;
    before-after | cpu-before-after) [[ -n $arg ]] || echo "$name:DIR, DIR = the baseline tree" ;;
    build | gpu-tests) ;;
    *) [[ -z $arg ]] || echo "$name takes no argument" ;;
  esac
}

usage() { sed -n '2,/^# shellcheck/{/^# shellcheck/d;s/^# \{0,1\}//;p}' "$0"; }
if [[ $# -eq 0 || $1 == -h || $1 == --help ]]; then usage; exit 2; fi
bad=0
for a in "$@"; do
  why=$(check "${a%%:*}" "$([[ $a == *:* ]] && echo "${a#*:}")")
  [[ -z $why ]] || { echo "run.sh: $a: $why (see --help)" >&2; bad=1; }
done
((bad == 0)) || exit 2

# shellcheck source=benchmarks/gpu/lib.sh
source benchmarks/gpu/lib.sh
note "steps: $*"

# Names carry the configuration: e.g. e2e_batch1_7b_np1_fp8.
tag() { echo "${MODEL:-7b}_np${NP:-1}${WEIGHT_DTYPE:+_$WEIGHT_DTYPE}${KV_DTYPE:+_kv$KV_DTYPE}"; }

# ab NAME SPEC ARGS..: e2e NAME_<tag> ARGS; with SPEC = VAR=a,b once per value (-x VAR=value
# added to ENVS), ROUNDS times, alternating.
ab() {
  local name spec=$2 values=${2#*=} r v rc=0
  name=$1_$(tag)
  shift 2
  if [[ -z $spec ]]; then e2e "$name" "$@"; return; fi
  for ((r = 1; r <= ${ROUNDS:-1}; r++)); do
    for v in ${values//,/ }; do
      ENVS="${ENVS:-} -x ${spec%%=*}=$v" e2e "${name}_${spec%%=*}=${v}_$r" "$@" || rc=1
    done
    pack
  done
  return "$rc"
}

step_build() {
  local want=() s t
  if [[ -n $1 ]]; then
    IFS=, read -ra want <<<"$1"
  else
    for s in "${steps[@]}"; do
      for t in $(targets "${s%%:*}"); do [[ " ${want[*]} " == *" $t "* ]] || want+=("$t"); done
    done
  fi
  gpu_build "${want[@]}"
}
step_node_check() {
  logged node_check 60 env LLAMA2_BIN=build-gpu/llama2 bash launch/gpu-check.sh ${NP:+--tp "$NP"} \
    --preset "${MODEL:-7b}"
  local rc=$?
  grep -E '^(WARN|FAIL)|^gpu-check:' "$O/node_check.log" | add
  return "$rc"
}
step_gpu_tests() { gpu_tests "$1"; }
step_ref_check() { ref_check "$1" "${NP:-1}" "$([[ $1 == all ]] && echo 500 || echo 300)"; }
step_e2e_batch1() { ab e2e_batch1 "$1" --batches 1 --prefill-lens ""; }
step_e2e_batch64() { ab e2e_batch64 "$1" --batches 64 --prefill-lens ""; }
step_e2e_sweep() {
  ab e2e_sweep "$1" --batches "${BATCHES:-1,16,32,64,128}" --prefill-lens "${PREFILL_LENS:-512,2048}"
}
step_prefill() { ab prefill "$1" --batches "" --prefill-lens "${PREFILL_LENS:-2048}" --repeats 5; }
step_op_profile() {
  local b=${1:-64} name args
  name=op_profile_${b}_$(tag)
  args=(--batches "$b" --decode-steps 3 --warmup 1 --repeats 1 --prefill-lens "")
  [[ $b == prefill ]] && args=(--batches "" --prefill-lens "${PREFILL_LENS:-2048}" --repeats 1 --warmup 1)
  ENVS="${ENVS:-} -x LLAMA2_OP_PROFILE=1" e2e "$name" "${args[@]}"
  local rc=$?
  grep op-profile "$O/$name.log" | tail -2 | add
  return "$rc"
}
step_e2e_matrix() {
  logged e2e_matrix 560 env SKIP_BUILD=1 RUN_TIMEOUT=150 bash benchmarks/e2e/run.sh "$O/e2e_matrix"
  local rc=$?
  add "$O/e2e_matrix/results.md"
  return "$rc"
}
step_saturation() {
  local var=LLAMA2_MIXED_DECODE values=1 r rc=0
  [[ -z $1 ]] || { var=${1%%=*} values=${1#*=}; }
  for ((r = 1; r <= ${ROUNDS:-1}; r++)); do sat "sat_$(tag)_$r" "$var" "${values//,/ }" || rc=1; done
  return "$rc"
}
step_before_after() {
  local base=$1 r side dir rc=0
  [[ -d $base ]] || { note "before-after: no baseline tree at $base"; return 1; }
  base=$(cd "$base" && pwd)
  logged build_baseline "${BUILD_TL:-240}" bash -c "cd '$base' && bash benchmarks/gpu/build.sh llama2 llama2_bench_e2e" || return 1
  for ((r = 1; r <= ${ROUNDS:-1}; r++)); do
    for side in before after; do
      dir=build-gpu
      [[ $side == before ]] && dir=$base/build-gpu
      BUILD_DIR=$dir e2e "ba_${side}_batch1_$r" --batches 1 --prefill-lens "" || rc=1
      BUILD_DIR=$dir sat "ba_${side}_sat_$r" LLAMA2_MIXED_DECODE 1 || rc=1
      BUILD_DIR=$dir MAX_NEW=896 REQUESTS=256 SERVE_ARGS="${SERVE_ARGS:-} --max-seq-len 1024" \
        sat "ba_${side}_long_$r" LLAMA2_MIXED_DECODE 1 || rc=1
    done
  done
  return "$rc"
}
step_cpu_before_after() {
  local base=$1 r side dir rc=0
  [[ -d $base ]] || { note "cpu-before-after: no baseline tree at $base"; return 1; }
  base=$(cd "$base" && pwd)
  [[ -x $base/build-gpu/llama2_bench_cpu ]] ||
    logged build_baseline_cpu "${BUILD_TL:-240}" bash -c "cd '$base' && bash benchmarks/gpu/build.sh llama2 llama2_bench_cpu" || return 1
  for ((r = 1; r <= ${ROUNDS:-1}; r++)); do
    for side in before after; do
      dir=$PWD/build-gpu
      [[ $side == before ]] && dir=$base/build-gpu
      logged "cpu_${side}_$r" 200 bash benchmarks/cpu_batch_throughput.sh "$dir" || rc=1
      grep '^|' "$O/cpu_${side}_$r.log" | add
    done
    pack
  done
  return "$rc"
}
step_constrained_ab() {
  local r rc=0 c=${CONSTRAINT:-'{"regex": "[a-z]+( [a-z]+)*", "ignore_eos": null}'} tok=build-gpu/constrain
  # Masks over a Llama-2-sized vocabulary: the 32,000-piece tokenizer of the constraint benchmark
  # (made here unless carried in build/constrain/), with the 7B's synthetic weights.
  [[ -f build/constrain/tokenizer-32k.model ]] ||
    logged constrain_tokenizer 120 env LLAMA2_BIN=build-gpu/llama2 bash benchmarks/cpu/constrain_tokenizer.sh build/constrain || return 1
  mkdir -p "$tok" && cp build/constrain/tokenizer-32k.model "$tok/tokenizer.model"
  cp tests/models/small-d64/generation_config.json "$tok/"
  for ((r = 1; r <= ${ROUNDS:-1}; r++)); do
    TOKENIZER_DIR=$tok MAX_BATCH=64 REQUESTS=64 MAX_NEW=256 sat "free_b64_$r" LLAMA2_MIXED_DECODE 1 || rc=1
    TOKENIZER_DIR=$tok MAX_BATCH=64 REQUESTS=64 MAX_NEW=256 EXTRA=$c sat "constrained_b64_$r" LLAMA2_MIXED_DECODE 1 || rc=1
  done
  return "$rc"
}
step_spec_ab() {
  local r rc=0 spec=${SPEC:-ngram:4}
  for ((r = 1; r <= ${ROUNDS:-1}; r++)); do
    MAX_BATCH=64 REQUESTS=64 MAX_NEW=256 sat "nospec_b64_$r" LLAMA2_MIXED_DECODE 1 || rc=1
    MAX_BATCH=64 REQUESTS=64 MAX_NEW=256 SERVE_ARGS="${SERVE_ARGS:-} --speculative $spec" \
      sat "spec_b64_$r" LLAMA2_MIXED_DECODE 1 || rc=1
  done
  return "$rc"
}
step_verify_cost() {
  e2e "verify_$(tag)" --batches "${VERIFY_BATCHES:-1}" --verify-lens 1,2,4,8,16 --prefill-lens "" \
    --decode-steps 32
}
step_rope_check() {
  logged rope_check 200 bash benchmarks/gpu/rope_check.sh
  local rc=$?
  add "$O/rope_check.log"
  return "$rc"
}
step_logits_adjust_cuda() {
  TL=120 mpi -np 1 build-gpu/tests/llama2_logits_adjust_test --model tests/models/small-d64 \
    --backend cuda >"$O/logits_adjust_cuda.log" 2>&1
  local rc=$?
  note "logits_adjust_cuda rc=$rc"
  tail -5 "$O/logits_adjust_cuda.log" | add
  return "$rc"
}
step_deterministic_cuda() {
  local rc=0 run np args
  gpu_tests "*invariant*" || rc=1
  for run in small-d64:fp16 small-d64-bf16: small-d128-f16: 7b:; do
    np=${NP:-1}
    args=(--model "tests/models/${run%%:*}")
    [[ ${run%%:*} == 7b ]] && np=1 args=(--synthetic 7b --prompts 4 --new-tokens 4)
    [[ -n ${run#*:} ]] && args+=(--dtype "${run#*:}")
    TL=300 mpi -np "$np" build-gpu/tests/llama2_deterministic_test --backend cuda "${args[@]}" \
      >"$O/deterministic_${run%%:*}_np$np.log" 2>&1 || rc=1
    note "deterministic ${run%%:*} np$np: $(grep -E '^(RESULT|runs|DIFF)' "$O/deterministic_${run%%:*}_np$np.log" | head -4 | tr '\n' ' ')"
  done
  logged deterministic_batch_cuda 200 bash tests/integration/deterministic_batch.sh build-gpu/llama2 \
    tests/models cuda || rc=1
  grep -E '^(ok|FAIL|note)' "$O/deterministic_batch_cuda.log" | add
  return "$rc"
}
# The same measurement without and with --deterministic, in turn, ROUNDS times.
step_deterministic_ab() {
  local r side flag rc=0
  for ((r = 1; r <= ${ROUNDS:-1}; r++)); do
    for side in default deterministic; do
      flag=()
      [[ $side == deterministic ]] && flag=(--deterministic)
      e2e "${side}_batch1_$(tag)_$r" --batches 1 --prefill-lens "" "${flag[@]}" || rc=1
      e2e "${side}_batch64_$(tag)_$r" --batches 64 --prefill-lens "" "${flag[@]}" || rc=1
      e2e "${side}_prefill_$(tag)_$r" --batches "" --prefill-lens "${PREFILL_LENS:-2048}" \
        --repeats 5 "${flag[@]}" || rc=1
    done
    pack
  done
  return "$rc"
}
step_deterministic_sat() {
  local r rc=0
  for ((r = 1; r <= ${ROUNDS:-1}; r++)); do
    sat "default_sat_$(tag)_$r" LLAMA2_MIXED_DECODE 1 || rc=1
    SERVE_ARGS="${SERVE_ARGS:-} --deterministic" sat "deterministic_sat_$(tag)_$r" LLAMA2_MIXED_DECODE 1 || rc=1
  done
  return "$rc"
}
step_batch_offline() {
  local name=batch_offline_${MODEL:-7b}${WEIGHT_DTYPE:+_$WEIGHT_DTYPE}${KV_DTYPE:+_kv$KV_DTYPE}
  logged "$name" 300 env SKIP_BUILD=1 SYNTHETIC="${MODEL:-7b}" BATCH_ARGS="$(dtype_args "${BATCH_ARGS:-}")" \
    bash benchmarks/serve/batch_offline.sh "$O/$name"
  local rc=$?
  head -1 "$O/$name/summary.txt" 2>&1 | add
  rm -f "$O/$name/prompts.jsonl" "$O/$name/results.jsonl"
  return "$rc"
}
step_prefix_ttft() { prefix "prefix_np${NP:-1}" "${SERVE_ENV:-}"; }
step_prefix_split() {
  local rc=0
  prefix "prefix_np${NP:-1}_split" "${SERVE_ENV:-}" || rc=1
  prefix "prefix_np${NP:-1}_nosplit" "${SERVE_ENV:-} -x LLAMA2_PREFILL_SPLIT=0" || rc=1
  return "$rc"
}
step_http_vs_socket() {
  # The script configures build-gpu/ with -DLLAMA2_HTTPLIB_DIR=.httplib itself (fails without it).
  logged http 480 env NP="${NP:-1}" bash benchmarks/http/gpu_http_vs_socket.sh "$O/http"
  local rc=$?
  if ((rc == 0)); then grep -E '^\|' "$O/http/summary.md"; else tail -5 "$O/http.log"; fi | add
  return "$rc"
}
step_access_log_ab() {
  local rc=0 log
  for log in off json; do
    logged "http_log_$log" 300 env NP="${NP:-1}" SATURATION_ONLY=1 ROUNDS=2 \
      N_TRIALS="$([[ $log == off ]] && echo 5 || echo 0)" SKIP_BUILD=1 \
      SERVE_ARGS="${SERVE_ARGS:-} --access-log $log" bash benchmarks/http/gpu_http_vs_socket.sh "$O/http_$log" || rc=1
    { echo "access log $log:"; grep -E '^\|' "$O/http_$log/summary.md"; cat "$O/http_$log/n_choices.txt"; } 2>&1 | add
    rm -f "$O/http_$log/steps.txt"
    pack
  done
  return "$rc"
}
step_kernels() { logged "bench_kernels_${1:-all}" 200 build-gpu/llama2_bench_kernels ${1:+"$1"}; }
step_perplexity() {
  local text=training/corpus/heldout.txt
  [[ -f $text ]] || text=tests/reference/perplexity/heldout-excerpt.txt
  note "perplexity of $text"
  # shellcheck disable=SC2086  # PPL_ROWS is a list
  logged ppl 300 bash benchmarks/accuracy/perplexity_matrix.sh build-gpu/llama2 models/docs-8m "$text" \
    "$O/ppl" ${PPL_ROWS:-cuda:fp16:auto:1 cuda:fp16:auto:1:fp8 cuda:fp16:auto:1:int8 cuda:bf16:auto:1 \
    cuda:bf16:auto:1:fp8 cuda:bf16:auto:1:int8}
  local rc=$?
  add "$O/ppl/table.md"
  # perplexity_matrix.sh exits 0 with failed rows in its table.
  grep -q '| failed |' "$O/ppl/table.md" && rc=1
  return "$rc"
}
# watchdog CASE LAUNCHER: llama2_watchdog_test CASE on the CUDA backend, the job started by
# tests/integration/mpirun.sh (LAUNCHER mpirun) or launch/llama2-mpirun (wrapper: wrapper_np.sh).
watchdog() {
  local sh=tests/integration/mpirun.sh
  [[ $2 == wrapper ]] && sh=tests/integration/wrapper_np.sh
  logged "watchdog_$1_$2" 180 env LLAMA2_TEST_TIMEOUT=150 build-gpu/tests/llama2_watchdog_test \
    build-gpu/llama2 tests/models/small-d128-f16 "$sh" "$1" cuda
  local rc=$?
  tail -1 "$O/watchdog_$1_$2.log" | add
  return "$rc"
}
step_watchdog() { watchdog hook mpirun; }
soak() {
  local np=${NP:-1}
  logged "soak_np$np" 430 env LLAMA2_TEST_TIMEOUT=400 build-gpu/tests/llama2_serve_soak build-gpu/llama2 \
    models/docs-8m tests/integration/mpirun.sh --np "$np" --backend cuda --record "$O/soak_np$np.txt"
  local rc=$?
  tail -2 "$O/soak_np$np.log" | add
  return "$rc"
}
step_soak() { soak; }
step_fp8_checkpoint() {
  logged fp8ckpt 300 bash benchmarks/gpu/fp8_checkpoint.sh "$O/fp8ckpt"
  local rc=$?
  grep -E '^(RESULT|STEP)' "$O/fp8ckpt.log" | awk '!seen[$0]++' | add
  return "$rc"
}

# The two-GPU calls prepared in sessions 17-18 (benchmarks/logs/next-h200x2/ in the history).
step_two_gpu_allreduce() {
  logged bench_allreduce 120 "${MPIRUN[@]}" -np 2 build-gpu/llama2_bench_allreduce
  local rc=$?
  tail -40 "$O/bench_allreduce.log" | add
  return "$rc"
}
step_two_gpu_7b() {
  local MODEL=7b WEIGHT_DTYPE="" KV_DTYPE="" ENVS="" r fuse rc=0
  for ((r = 1; r <= ${ROUNDS:-2}; r++)); do
    NP=1 e2e "7b_tp1_$r" --batches 1,8,64 --prefill-lens "" || rc=1
    for fuse in 0 1; do
      NP=2 ENVS="-x LLAMA2_FUSE_ALLREDUCE_NORM=$fuse" e2e "7b_tp2_fuse${fuse}_$r" --batches 1,8,64 \
        --prefill-lens "" || rc=1
    done
    pack
  done
  return "$rc"
}
step_two_gpu_70b() {
  local MODEL=70b NP=2 WEIGHT_DTYPE="" KV_DTYPE="" ENVS="" TL=300 rc=0
  e2e 70b_tp2_fp16 --batches 1,8 --prefill-lens "" || rc=1
  e2e 70b_tp2_fp8 --batches 1,8 --prefill-lens "" --weight-dtype fp8 || rc=1
  return "$rc"
}
step_two_gpu_saturation() {
  local MODEL=7b WEIGHT_DTYPE="" KV_DTYPE="" SERVE_ARGS="" rc=0 j=LLAMA2_MIXED_DECODE=1.json
  NP=1 sat sat_tp1 LLAMA2_MIXED_DECODE 1 || rc=1
  NP=2 sat sat_tp2 LLAMA2_MIXED_DECODE 1 || rc=1
  NP=2 SERVE_ARGS="--tp 1" sat sat_dp2 LLAMA2_MIXED_DECODE 1 || rc=1
  awk -v a="$(tok_s "$O/sat_tp1/$j")" -v b="$(tok_s "$O/sat_tp2/$j")" -v c="$(tok_s "$O/sat_dp2/$j")" \
    'BEGIN { if (a > 0) printf "tok/s TP1 %d, TP2 %d (%.2fx), DP2 %d (%.2fx; target >= 1.9x)\n", a, b, b / a, c, c / a }' | add
  return "$rc"
}
step_two_gpu_ref_check() { ref_check "${1:-fp8kv}" 2 "$([[ $1 == all ]] && echo 500 || echo 300)"; }
step_two_gpu_kill() {
  local l c rc=0
  for l in ${LAUNCHERS:-mpirun wrapper}; do
    for c in stall kill; do watchdog "$c" "$l" || rc=1; done
  done
  return "$rc"
}
step_two_gpu_soak() { NP=2 soak; }
step_two_gpu_prefix_split() {
  local NP=2 WEIGHT_DTYPE="" KV_DTYPE="" SERVE_ARGS="" SERVE_ENV=""
  step_prefix_split
}

steps=("$@")
status=0
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
for i in "${!steps[@]}"; do
  a=${steps[i]} name=${steps[i]%%:*} arg=""
  [[ $a == *:* ]] && arg=${a#*:}
  missing=""
  for t in $(targets "$name"); do
    [[ -x build-gpu/$t || -x build-gpu/tests/$t ]] || missing+=" $t"
  done
  if (($(limit 9999) < 30)); then
    note "$a: NOT RUN: the call's budget (BUDGET_S=$BUDGET_S) is spent"
  elif [[ $name == two-gpu-* ]] && ((gpus < 2)); then
    note "$a: NOT RUN: needs two GPUs, nvidia-smi lists $gpus (kind nvidia-h200-x2)"
  elif [[ -n $missing ]]; then
    note "$a: NOT RUN: not built:$missing (put the build step first)"
  else
    note "== $a"
    "step_${name//-/_}" "$arg" && { pack; continue; }
    note "$a: FAILED"
    if [[ $name == build ]]; then
      note "NOT RUN (the build failed): ${steps[*]:i+1}"
      status=1
      break
    fi
  fi
  status=1
  pack
done
note "done: $([[ $status == 0 ]] && echo "every step passed" || echo "FAILED or NOT RUN steps above")"
pack
echo "summary: $OUT/summary.txt; every log: $OUT/all.tgz (from $O)"
exit $status
