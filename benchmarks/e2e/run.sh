#!/usr/bin/env bash
# The end-to-end benchmark matrix on a GPU node: llama2_bench_e2e for each model x TP degree, one
# JSON (+ log) per run in OUT_DIR, then the Markdown table and the decode plot (report.py).
#
#   bash benchmarks/e2e/run.sh OUT_DIR
#
# Environment (all optional):
#   MODELS="7b 13b 70b"  TPS="1 2"          the matrix (combinations that do not fit are skipped)
#   BATCHES=1,8,32,64  PROMPT_LEN=128  DECODE_STEPS=128  PREFILL_LENS=512,2048
#   WARMUP=1  REPEATS=3                      passed to llama2_bench_e2e
#   EXTRA_ARGS="--no-cuda-graphs"            appended to every llama2_bench_e2e command
#   SKIP_BUILD=1                             use the existing build-gpu/ binaries
#   RUN_TIMEOUT=600                          seconds per run (timeout kills a hung job)
set -euo pipefail
OUT_DIR=${1:?usage: bash benchmarks/e2e/run.sh OUT_DIR}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)
cd "$(dirname "$0")/../.."

MODELS=${MODELS:-"7b 13b 70b"}
TPS=${TPS:-"1 2"}
BATCHES=${BATCHES:-1,8,32,64}
PROMPT_LEN=${PROMPT_LEN:-128}
DECODE_STEPS=${DECODE_STEPS:-128}
PREFILL_LENS=${PREFILL_LENS:-512,2048}
WARMUP=${WARMUP:-1}
REPEATS=${REPEATS:-3}
EXTRA_ARGS=${EXTRA_ARGS:-}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}

# Site policy (shared/HARDWARE.md): NVLink multicast stays off, on every rank.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

# benchmarks/gpu/build.sh configures build-gpu/ (Release, -Werror); the executables land in it.
if [[ "${SKIP_BUILD:-0}" != 1 ]]; then
  bash benchmarks/gpu/build.sh llama2 llama2_bench_e2e
fi
BENCH=build-gpu/llama2_bench_e2e
PLAN=build-gpu/llama2
for bin in "$BENCH" "$PLAN"; do
  [[ -x "$bin" ]] || { echo "run.sh: $bin not found (build it, or unset SKIP_BUILD)" >&2; exit 1; }
done

GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
# Memory of one GPU for the fit check (MiB as nvidia-smi reports it; H200: ~139 GiB usable).
GPU_MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null |
          head -n 1 | tr -d ' ' || true)
GPU_MEM=${GPU_MEM:+${GPU_MEM}MiB}
GPU_MEM=${GPU_MEM:-139GiB}
echo "run.sh: ${GPUS:-0} GPU(s) of $GPU_MEM; models [$MODELS], tp [$TPS] -> $OUT_DIR"

# The longest sequence the benchmark keeps in the cache: what the fit check must plan for.
max_len=$((PROMPT_LEN + WARMUP + DECODE_STEPS))
for p in ${PREFILL_LENS//,/ }; do
  if ((p > max_len)); then max_len=$p; fi
done

failed=()
for model in $MODELS; do
  for tp in $TPS; do
    name="${model}-tp${tp}"
    if ((tp > ${GPUS:-0})); then
      echo "== $name: skipped (needs $tp GPUs, ${GPUS:-0} visible)"
      continue
    fi
    # `llama2 plan` is the engine's own sizing arithmetic: exit 0 fits, 1 does not (70b at tp 1:
    # 138 GB of fp16 weights on one 141 GB GPU), 2 usage error.
    rc=0
    "$PLAN" plan --preset "$model" --tp "$tp" --gpu-mem "$GPU_MEM" --dtype fp16 \
      --max-seq-len "$max_len" >"$OUT_DIR/$name.plan.txt" 2>&1 || rc=$?
    if ((rc == 1)); then
      echo "== $name: skipped, does not fit: $(grep -m1 'fits' "$OUT_DIR/$name.plan.txt" | sed 's/^ *fits *//')"
      continue
    elif ((rc != 0)); then
      echo "== $name: llama2 plan failed (exit $rc), see $OUT_DIR/$name.plan.txt" >&2
      failed+=("$name")
      continue
    fi
    echo "== $name"
    rm -f "$OUT_DIR/$name.json"
    rc=0
    # shellcheck disable=SC2086  # EXTRA_ARGS is a list of flags
    timeout "$RUN_TIMEOUT" mpirun --allow-run-as-root --oversubscribe \
      -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS \
      -np "$tp" "$BENCH" --synthetic "$model" --dtype fp16 --batches "$BATCHES" \
      --prompt-len "$PROMPT_LEN" --decode-steps "$DECODE_STEPS" --prefill-lens "$PREFILL_LENS" \
      --warmup "$WARMUP" --repeats "$REPEATS" --json "$OUT_DIR/$name.json" $EXTRA_ARGS \
      2>&1 | tee "$OUT_DIR/$name.log" || rc=$?  # pipefail: the benchmark's status, not tee's
    if ((rc != 0)); then
      echo "== $name: FAILED (exit $rc; 124 = timed out after ${RUN_TIMEOUT}s)," \
           "log: $OUT_DIR/$name.log" >&2
      rm -f "$OUT_DIR/$name.json"  # an interrupted run leaves an empty file
      failed+=("$name")
    fi
  done
done

shopt -s nullglob
results=("$OUT_DIR"/*.json)
# Debian's python3-matplotlib is installed for /usr/bin/python3, which a pyenv or venv python3
# earlier in PATH does not see.
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import matplotlib' 2>/dev/null && /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
  PYTHON=/usr/bin/python3
fi
REPORT="python3 benchmarks/e2e/report.py $OUT_DIR/*.json --md $OUT_DIR/results.md --png $OUT_DIR/decode.png"
if ((${#results[@]} == 0)); then
  echo "run.sh: no results in $OUT_DIR" >&2
elif "$PYTHON" -c 'import matplotlib' 2>/dev/null; then
  "$PYTHON" benchmarks/e2e/report.py "${results[@]}" --md "$OUT_DIR/results.md" \
    --png "$OUT_DIR/decode.png"
else
  # The table needs only the standard library; the plot waits for a machine with matplotlib.
  "$PYTHON" benchmarks/e2e/report.py "${results[@]}" --md "$OUT_DIR/results.md"
  echo "run.sh: matplotlib is not installed here: for the plot, copy $OUT_DIR to a machine" \
       "with python3-matplotlib (apt-get install python3-matplotlib) and run:"
  echo "  $REPORT"
fi

if ((${#failed[@]})); then
  echo "run.sh: failed: ${failed[*]}" >&2
  exit 1
fi
