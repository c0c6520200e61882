#!/usr/bin/env bash
# GPU correctness checks, run by hand on the GPU node (2 GPUs, torch + transformers installed):
#
#   bash tests/reference/gpu_check.sh [OUTDIR]        (default ./gpu-check-out)
#
# a. builds build-gpu/ (SKIP_BUILD=1 skips it);            b. runs the kernel tests;
# c. CUDA fp32 vs the CPU fp32 HF fixtures (small-*);
# d. makes a random 32000-vocab model (fp16 and bf16 files) and HF fixtures computed on cuda in
#    float16, bfloat16 and fp32 (OUTDIR/fixtures-{fp16,bf16,fp32}/);
# e. CUDA fp16/bf16 vs HF in the same dtype, CUDA fp32 vs HF fp32 for the random model;
# f. HF's own dtype noise (HF-fp16/bf16 vs HF-fp32), next to our deviation (OUTDIR/noise.txt);
# h. the fp8 KV cache (--kv-cache-dtype fp8): fp16/bf16 with an e4m3 cache vs HF with its cached
#    K/V rounded to e4m3 (make_fixtures.py --kv-cache-dtype fp8_e4m3), within NOISE_FACTOR x that
#    configuration's own noise (HF-with-fp8-KV vs HF-fp32 on the same files).
# i. quantized projections (--weight-dtype fp8 | int8): CUDA fp16/bf16 vs HF applying the same
#    quantization (make_fixtures.py --weight-dtype, per np: o/down are quantized per rank's shard),
#    within NOISE_FACTOR x the dtype's noise under that quantization (HF-quantized in dtype vs
#    HF-quantized in fp32).
# Every reference run also checks the logprobs the engine reports (greedy, top-k and top-p
# requests; both gather paths) against HF's log-softmax of the same rows (reference_logprobs.h):
# its RESULT line has logprob_max_diff=, logprobs_compared=, logprob_failures=.
# CHECKS=fp8kv runs only a, h and what h needs; CHECKS=wquant only a, i and what i needs;
# CHECKS=logprobs only a, the GPU logprobs kernel test and c (no torch needed); CHECKS=int4 only
# a, the 4-bit kernel tests and j:
# j. 4-bit weights (#38): the AWQ / GPTQ files that `llama2 quantize` writes (the source model and
#    recipes of make_int4_fixtures.py, a GPTQ file with contiguous groups, the random model as AWQ)
#    on CUDA fp16 (packed 4-bit kernels; the act-order file dequantized at load) vs transformers in
#    fp16 on the reference dequantizer's weights (dequantize_int4.py), within NOISE_FACTOR x HF's
#    own noise there (HF-fp16 vs HF-fp32 on the same dequantized weights). The CPU backend is held
#    to fp32 precision against the same dequantized weights in CI (tests/integration/
#    int4_checkpoint.sh), so this is CUDA vs CPU through one reference. `--weight-dtype int4` on
#    the fp16 sources (round-to-nearest at load, AWQ's rule) is checked against the AWQ files'
#    fixtures and must agree with the AWQ files' runs (the same max |diff|: INT4-SAME lines). At
#    $INT4_NPS (1).
# Every other reference run is at np 1 and 2 ($NPS). All RESULT/STEP/NOISE lines go to
# OUTDIR/summary.txt, logs to OUTDIR/logs/; the exit code is non-zero if anything failed.
# Tolerances are explained in tests/reference/README.md.
set -uo pipefail  # no -e: every check runs and reports even after an earlier one failed

# fp16/bf16 tolerances come from HF itself (step f runs first): HF-in-dtype deviates from HF-fp32
# on the same files by some max |logit diff| (the dtype's own noise for that model); ours vs
# HF-in-dtype must stay within NOISE_FACTOR x that, and a greedy divergence is a near-tie (forgiven)
# where HF's top-2 margin is below NOISE_FACTOR x that noise (a margin inside the dtype's own error
# can flip either way). See tests/reference/README.md.
NOISE_FACTOR=${NOISE_FACTOR:-2}
# fp32 on cuda vs fp32 HF: only summation order differs (TF32 off on both sides).
FP32_TOL=${FP32_TOL:-1e-3}
FP32_NEAR_TIE=${FP32_NEAR_TIE:-1e-3}
NPS=${NPS:-1 2}
INT4_NPS=${INT4_NPS:-1}
CHECKS=${CHECKS:-all}  # all | fp8kv | wquant | logprobs | int4
case $CHECKS in all | fp8kv | wquant | logprobs | int4) ;; *) echo "CHECKS must be all, fp8kv, wquant, logprobs or int4 (got '$CHECKS')" >&2; exit 2 ;; esac
all() { [ "$CHECKS" = all ]; }
kv8() { [ "$CHECKS" = all ] || [ "$CHECKS" = fp8kv ]; }
wq() { [ "$CHECKS" = all ] || [ "$CHECKS" = wquant ]; }
i4() { [ "$CHECKS" = all ] || [ "$CHECKS" = int4 ]; }
logprobs_only() { [ "$CHECKS" = logprobs ]; }
# Models of step i: every projection's input width must be a multiple of 16 at each np (fp8).
WQ_SMALL=${WQ_SMALL:-small-d128-f16}
MPI_TIMEOUT=${MPI_TIMEOUT:-300}

out_arg=${1:-./gpu-check-out}
mkdir -p "$out_arg" || exit 1
OUT=$(cd "$out_arg" && pwd)
cd "$(dirname "$0")/../.." || exit 1
ROOT=$(pwd)
PY=${PYTHON:-python3}
BIN=$ROOT/build-gpu/tests/llama2_reference_test
LOGS=$OUT/logs
SUMMARY=$OUT/summary.txt
CPU_FIXTURES=$ROOT/tests/reference/fixtures
SMALL="small-d64 small-d128-f16 small-d64-bf16"
mkdir -p "$LOGS"
: > "$SUMMARY"

# NVLink multicast stays off (launch/env.sh, docs/install.md); -x forwards these to every rank.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

{
  date -u
  nvidia-smi -L
  mpirun --version | head -n 1
  "$PY" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
} > "$OUT/env.txt" 2>&1

# step NAME LOG CMD...: runs CMD with its output in LOG and records a STEP line.
step() {
  local name=$1 log=$2 rc status=PASS
  shift 2
  echo "== $name" >&2
  "$@" > "$log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || status=FAIL
  echo "STEP $name rc=$rc status=$status" >> "$SUMMARY"
  [ "$status" = PASS ] || echo "   FAILED (rc $rc): see $log" >&2
  return "$rc"
}

# ref MODEL_DIR FIXTURE DTYPE TOLERANCE NEAR_TIE [KV_DTYPE [WEIGHT_DTYPE]]: llama2_reference_test
# on cuda at every np.
ref() {
  local model_dir=$1 fixture=$2 dtype=$3 tol=$4 near_tie=$5 kv=${6:-auto} wd=${7:-auto} label np log rc line
  label=$(basename "$model_dir")
  for np in $NPS; do
    log=$LOGS/ref-$dtype-kv$kv-w$wd-$label-np$np.log
    echo "== reference $label $dtype np=$np" >&2
    if [ ! -f "$fixture" ]; then
      line="RESULT model=$label backend=cuda dtype=$dtype np=$np reason=no-fixture status=FAIL"
    else
      timeout --kill-after=10 "$MPI_TIMEOUT" mpirun --allow-run-as-root --oversubscribe \
        -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS \
        -np "$np" "$BIN" --model "$model_dir" --fixture "$fixture" --backend cuda \
        --dtype "$dtype" --kv-cache-dtype "$kv" --weight-dtype "$wd" --tolerance "$tol" \
        --near-tie "$near_tie" > "$log" 2>&1
      rc=$?
      line=$(grep '^RESULT ' "$log" | tail -n 1)
      # A crash, a hang (timeout: rc 124/137) or an exit code that contradicts the line fails.
      if [ -z "$line" ]; then
        line="RESULT model=$label backend=cuda dtype=$dtype np=$np reason=no-RESULT-line rc=$rc status=FAIL"
      elif [ "$rc" -ne 0 ] && [[ $line == *status=PASS ]]; then
        line="${line% status=PASS} reason=exit-code-$rc status=FAIL"
      fi
    fi
    echo "$line" >> "$SUMMARY"
    echo "   $line" >&2
  done
}

# ---- a. build, b. kernel tests
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  if ! step build "$LOGS/build.log" bash benchmarks/gpu/build.sh llama2 llama2_reference_test llama2_gpu_tests llama2_logits_diff; then
    cat "$SUMMARY"
    exit 1
  fi
fi
all && step gpu-kernel-tests "$LOGS/gpu_tests.log" timeout 600 build-gpu/tests/llama2_gpu_tests --force-colors=0
[ "$CHECKS" = int4 ] && step gpu-4bit-tests "$LOGS/gpu_4bit.log" timeout 600 \
  build-gpu/tests/llama2_gpu_tests --force-colors=0 --test-case='4-bit*'
logprobs_only && step gpu-logprobs-test "$LOGS/gpu_logprobs.log" timeout 600 \
  build-gpu/tests/llama2_gpu_tests --force-colors=0 --test-case='logprobs*'

# ---- c. CUDA fp32 vs CPU fp32 HF fixtures. Fixtures not committed yet are made here the same way.
missing=""
for m in $SMALL; do
  [ -f "$CPU_FIXTURES/$m.json" ] || missing+="${missing:+,}$m"
done
if [ -n "$missing" ]; then
  step "fixtures-cpu-fp32($missing)" "$LOGS/fixtures-cpu-fp32.log" "$PY" tests/reference/make_fixtures.py \
    --models tests/models --only "$missing" --out "$OUT/fixtures-cpu-fp32"
fi
cpu_fixture() {
  if [ -f "$CPU_FIXTURES/$1.json" ]; then echo "$CPU_FIXTURES/$1.json"; else echo "$OUT/fixtures-cpu-fp32/$1.json"; fi
}
if all || logprobs_only; then
  for m in $SMALL; do
    ref "$ROOT/tests/models/$m" "$(cpu_fixture "$m")" fp32 "$FP32_TOL" "$FP32_NEAR_TIE"
  done
fi
if logprobs_only; then
  echo
  cat "$SUMMARY"
  if grep -q 'status=FAIL' "$SUMMARY" || ! grep -q '^RESULT .*logprobs_compared=[1-9]' "$SUMMARY"; then
    echo "gpu_check: FAIL (details in $LOGS)"
    exit 1
  fi
  echo "gpu_check: PASS"
  exit 0
fi

# ---- d. random 32000-vocab models and HF fixtures on cuda
TMP=$(mktemp -d "${TMPDIR:-/tmp}/llama2-gpu-check.XXXXXX") || exit 1
if [ "${KEEP_MODELS:-0}" = 1 ]; then echo "random models kept in $TMP" >&2; else trap 'rm -rf "$TMP"' EXIT; fi
step random-fp16 "$LOGS/random-fp16.log" "$PY" tests/reference/make_random_model.py --dtype float16 --out "$TMP/random-fp16"
step random-bf16 "$LOGS/random-bf16.log" "$PY" tests/reference/make_random_model.py --dtype bfloat16 --out "$TMP/random-bf16"
small_csv=${SMALL// /,}
# fixtures NAME MODELS_DIR ONLY DTYPE OUTSUB [MORE FLAGS]
fixtures() {
  step "fixtures-$1" "$LOGS/fixtures-$1.log" "$PY" tests/reference/make_fixtures.py --models "$2" \
    --only "$3" --dtype "$4" --device cuda --out "$OUT/$5" "${@:6}"
}
if all; then
  fixtures fp16-small tests/models "$small_csv" float16 fixtures-fp16
  fixtures fp16-random "$TMP" random-fp16 float16 fixtures-fp16
  fixtures bf16-small tests/models "$small_csv" bfloat16 fixtures-bf16
  fixtures bf16-random "$TMP" random-bf16 bfloat16 fixtures-bf16
fi
if kv8; then
  fixtures fp8kv-fp16-small tests/models "$small_csv" float16 fixtures-fp8kv-fp16 --kv-cache-dtype fp8_e4m3
  fixtures fp8kv-fp16-random "$TMP" random-fp16 float16 fixtures-fp8kv-fp16 --kv-cache-dtype fp8_e4m3
  fixtures fp8kv-bf16-random "$TMP" random-bf16 bfloat16 fixtures-fp8kv-bf16 --kv-cache-dtype fp8_e4m3
fi
WQ_DTYPES="fp8_e4m3 int8"
if wq; then
  for wd in $WQ_DTYPES; do
    for np in $NPS; do
      for dt in float16 float32; do
        fixtures "w$wd-$dt-small-tp$np" tests/models "${WQ_SMALL// /,}" $dt "fixtures-w$wd-$dt-tp$np" \
          --weight-dtype "$wd" --tp "$np"
        fixtures "w$wd-$dt-random-tp$np" "$TMP" random-fp16 $dt "fixtures-w$wd-$dt-tp$np" \
          --weight-dtype "$wd" --tp "$np"
      done
    done
  done
fi
# j's models: 4-bit files from `llama2 quantize` (recipes of make_int4_fixtures.py and two more),
# the reference dequantizer's fp32 folders, and transformers' fixtures on them in fp16 and fp32.
I4=$TMP/int4
INT4_FILES="int4-awq int4-gptq-g128 int4-gptq-act-order random-awq"
if i4; then
  mkdir -p "$I4/q" "$I4/deq"
  read -ra i4_source < <(PYTHONPATH=tests/reference "$PY" -c \
    'import make_int4_fixtures as m; print(" ".join(m.SOURCE[1:]))')
  step int4-source "$LOGS/int4-source.log" build-gpu/llama2 make-test-model --out "$I4/int4-src" "${i4_source[@]}"
  i4_recipe() {  # NAME SOURCE_DIR QUANTIZE_FLAGS...
    step "int4-quantize-$1" "$LOGS/int4-quantize-$1.log" build-gpu/llama2 quantize --model "$2" \
      --out "$I4/q/$1" "${@:3}" &&
      step "int4-dequantize-$1" "$LOGS/int4-dequantize-$1.log" "$PY" tests/reference/dequantize_int4.py \
        "$I4/q/$1" "$I4/deq/$1"
  }
  i4_recipe int4-awq "$I4/int4-src" --format awq --group-size 128
  i4_recipe int4-gptq-g128 "$I4/int4-src" --format gptq --group-size 128
  i4_recipe int4-gptq-act-order "$I4/int4-src" --format gptq --group-size 64 --desc-act --checkpoint-format gptq_v2
  i4_recipe random-awq "$TMP/random-fp16" --format awq --group-size 128
  fixtures int4-fp16 "$I4/deq" "${INT4_FILES// /,}" float16 fixtures-int4-fp16
  fixtures int4-fp32 "$I4/deq" "${INT4_FILES// /,}" float32 fixtures-int4-fp32
fi
# fp32 for both random models: each dtype's noise is measured against its own files upcast.
fixtures fp32-random "$TMP" random-fp16,random-bf16 float32 fixtures-fp32

# ---- f. HF's own dtype noise: HF-in-dtype vs HF-fp32 on the same files (run before e: it sets
# e's tolerances, and again after e to print ours next to it).
pairs=$OUT/noise-pairs.txt  # MODEL DTYPE HF_IN_DTYPE_FIXTURE HF_FP32_FIXTURE
FP8=+kv-fp8_e4m3  # the dtype label of llama2_reference_test's RESULT line with an fp8 cache
{
  if all; then
    for m in $SMALL; do
      echo "$m fp16 $OUT/fixtures-fp16/$m.json $(cpu_fixture "$m")"
      echo "$m bf16 $OUT/fixtures-bf16/$m.json $(cpu_fixture "$m")"
    done
    echo "random-fp16 fp16 $OUT/fixtures-fp16/random-fp16.json $OUT/fixtures-fp32/random-fp16.json"
    echo "random-bf16 bf16 $OUT/fixtures-bf16/random-bf16.json $OUT/fixtures-fp32/random-bf16.json"
  fi
  if kv8; then
    for m in $SMALL; do
      echo "$m fp16$FP8 $OUT/fixtures-fp8kv-fp16/$m.json $(cpu_fixture "$m")"
    done
    echo "random-fp16 fp16$FP8 $OUT/fixtures-fp8kv-fp16/random-fp16.json $OUT/fixtures-fp32/random-fp16.json"
    echo "random-bf16 bf16$FP8 $OUT/fixtures-fp8kv-bf16/random-bf16.json $OUT/fixtures-fp32/random-bf16.json"
  fi
  # Quantized: the label carries np too (the fixtures differ per np); see step i.
  if wq; then
    for wd in $WQ_DTYPES; do
      for np in $NPS; do
        for m in $WQ_SMALL random-fp16; do
          echo "$m fp16+w-$wd@np$np $OUT/fixtures-w$wd-float16-tp$np/$m.json $OUT/fixtures-w$wd-float32-tp$np/$m.json"
        done
      done
    done
  fi
  # 4-bit: the files run as stored (dtype fp16), and the fp16 sources quantized at load (fp16+w-int4).
  if i4; then
    for m in $INT4_FILES; do
      echo "$m fp16 $OUT/fixtures-int4-fp16/$m.json $OUT/fixtures-int4-fp32/$m.json"
    done
    # RESULT lines name the fixture's model: the AWQ file's, for the source quantized at load too.
    echo "int4-awq fp16+w-int4 $OUT/fixtures-int4-fp16/int4-awq.json $OUT/fixtures-int4-fp32/int4-awq.json"
    echo "random-awq fp16+w-int4 $OUT/fixtures-int4-fp16/random-awq.json $OUT/fixtures-int4-fp32/random-awq.json"
  fi
} > "$pairs"
cat > "$TMP/noise.py" <<'PYEOF'
import json
import sys

# Our max |diff| vs HF-in-dtype per (model, dtype), over the rank counts, from the RESULT lines.
ours = {}
for line in open(sys.argv[1]):
    if line.startswith("RESULT "):
        kv = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
        if "max_abs_diff" in kv:
            key = (kv["model"], kv["dtype"])
            ours[key] = max(ours.get(key, 0.0), float(kv["max_abs_diff"]))


def rows(prompt):
    positions = prompt.get("logit_positions", range(len(prompt["logits"])))
    return dict(zip(positions, prompt["logits"]))


for model, dtype, low_path, ref_path in (line.split() for line in open(sys.argv[2]) if line.strip()):
    try:
        low, ref = json.load(open(low_path)), json.load(open(ref_path))
    except (OSError, ValueError) as e:
        print(f"NOISE model={model} dtype={dtype} error=fixture-unreadable ({e.__class__.__name__})")
        continue
    ref_prompts = {p["name"]: p for p in ref["prompts"]}
    diff = mag = 0.0
    n = same = total = 0
    for p in low["prompts"]:
        q = ref_prompts.get(p["name"])
        if q is None or q["prompt_ids"] != p["prompt_ids"]:
            continue
        a, b = rows(p), rows(q)
        for pos in a.keys() & b.keys():
            for x, y in zip(a[pos], b[pos]):
                diff, mag, n = max(diff, abs(x - y)), max(mag, abs(y)), n + 1
        total += 1
        same += p["greedy"] == q["greedy"]
    o = ours.get((model, dtype))
    o_text = f"ours_vs_hf={o:.3g} ratio={o / diff:.2f}" if o is not None and diff > 0 else "ours_vs_hf=n/a"
    print(f"NOISE model={model} dtype={dtype} hf_vs_fp32={diff:.3g} max_abs_logit={mag:.3g} "
          f"compared={n} hf_greedy_same_as_fp32={same}/{total} {o_text}")
PYEOF

"$PY" "$TMP/noise.py" "$SUMMARY" "$pairs" > "$OUT/noise.txt" 2> "$LOGS/noise.log"
# noise_of MODEL DTYPE -> NOISE_FACTOR x HF's noise (1e-3 floor; 0 when HF's fixtures are missing,
# so that the run fails instead of passing unchecked).
noise_of() {
  awk -v m="$1" -v d="$2" -v f="$NOISE_FACTOR" '
    $1 == "NOISE" { split($2, a, "="); split($3, b, "="); split($4, c, "=");
      if (!found && a[2] == m && b[2] == d && c[1] == "hf_vs_fp32") { v = f * c[2]; if (v < 1e-3) v = 1e-3; print v; found = 1 } }
    END { if (!found) print 0 }' "$OUT/noise.txt"
}

# ---- e. CUDA in dtype vs HF in dtype; CUDA fp32 vs HF fp32 on the random model
if all; then
  for m in $SMALL; do
    t=$(noise_of "$m" fp16); ref "$ROOT/tests/models/$m" "$OUT/fixtures-fp16/$m.json" fp16 "$t" "$t"
  done
  t=$(noise_of random-fp16 fp16); ref "$TMP/random-fp16" "$OUT/fixtures-fp16/random-fp16.json" fp16 "$t" "$t"
  for m in $SMALL; do
    t=$(noise_of "$m" bf16); ref "$ROOT/tests/models/$m" "$OUT/fixtures-bf16/$m.json" bf16 "$t" "$t"
  done
  t=$(noise_of random-bf16 bf16); ref "$TMP/random-bf16" "$OUT/fixtures-bf16/random-bf16.json" bf16 "$t" "$t"
  ref "$TMP/random-fp16" "$OUT/fixtures-fp32/random-fp16.json" fp32 "$FP32_TOL" "$FP32_NEAR_TIE"
fi

# ---- h. fp8 KV cache vs HF with e4m3-rounded K/V, within NOISE_FACTOR x that setup's own noise
if kv8; then
  for m in $SMALL; do
    t=$(noise_of "$m" "fp16$FP8")
    ref "$ROOT/tests/models/$m" "$OUT/fixtures-fp8kv-fp16/$m.json" fp16 "$t" "$t" fp8
  done
  t=$(noise_of random-fp16 "fp16$FP8")
  ref "$TMP/random-fp16" "$OUT/fixtures-fp8kv-fp16/random-fp16.json" fp16 "$t" "$t" fp8
  t=$(noise_of random-bf16 "bf16$FP8")
  ref "$TMP/random-bf16" "$OUT/fixtures-fp8kv-bf16/random-bf16.json" bf16 "$t" "$t" fp8
fi

# ---- i. quantized projections vs HF with the same quantization, per np (see the header)
if wq; then
  all_nps=$NPS
  for wd in $WQ_DTYPES; do
    for np in $all_nps; do
      for m in $WQ_SMALL random-fp16; do
        dir=$ROOT/tests/models/$m
        [ "$m" = random-fp16 ] && dir=$TMP/random-fp16
        t=$(noise_of "$m" "fp16+w-$wd@np$np")
        NPS=$np ref "$dir" "$OUT/fixtures-w$wd-float16-tp$np/$m.json" fp16 "$t" "$t" auto "$wd"
      done
    done
  done
  NPS=$all_nps
fi

# ---- j. 4-bit files and --weight-dtype int4 vs transformers on the dequantized weights (header)
if i4; then
  for m in $INT4_FILES; do
    t=$(noise_of "$m" fp16)
    NPS=$INT4_NPS ref "$I4/q/$m" "$OUT/fixtures-int4-fp16/$m.json" fp16 "$t" "$t"
  done
  t=$(noise_of int4-awq fp16+w-int4)
  NPS=$INT4_NPS ref "$I4/int4-src" "$OUT/fixtures-int4-fp16/int4-awq.json" fp16 "$t" "$t" auto int4
  t=$(noise_of random-awq fp16+w-int4)
  NPS=$INT4_NPS ref "$TMP/random-fp16" "$OUT/fixtures-int4-fp16/random-awq.json" fp16 "$t" "$t" auto int4
  # A 400-token prompt (token by token, one prefill, chunks of 5): the prefill's products of more
  # rows than the 4-bit GEMM takes run on a dequantized copy through cuBLAS. The AWQ file on CUDA
  # against its dequantized weights on CUDA in fp16 (the same fp16 values), within HF's noise.
  t=$(noise_of int4-awq fp16)
  log=$LOGS/logits-diff-int4-awq-prompt400.log
  timeout --kill-after=10 "$MPI_TIMEOUT" mpirun --allow-run-as-root --oversubscribe \
    -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -np 1 \
    build-gpu/tests/llama2_logits_diff --model "$I4/q/int4-awq" --against "$I4/deq/int4-awq" \
    --backend cuda --dtype fp16 --prompt-len 400 --tolerance "$t" > "$log" 2>&1
  line=$(grep '^RESULT ' "$log" | tail -n 1)
  echo "RESULT model=int4-awq-prompt400 backend=cuda dtype=fp16 ${line:-reason=no-RESULT-line status=FAIL}" |
    sed 's/ RESULT / /' >> "$SUMMARY"
  # The same weights by two routes: the AWQ file's run and the source's int4 run must agree exactly.
  for m in int4-awq random-awq; do
    # The file's run is the model's first RESULT line of this step, the source's the second (both
    # say dtype=fp16+w-int4 when the file runs packed).
    a=$(grep "^RESULT model=$m " "$SUMMARY" | sed -n 1p | grep -o ' max_abs_diff=[^ ]*')
    b=$(grep "^RESULT model=$m " "$SUMMARY" | sed -n 2p | grep -o ' max_abs_diff=[^ ]*')
    status=PASS
    [ -n "$a" ] && [ "$a" = "$b" ] || status=FAIL
    echo "INT4-SAME model=$m file_${a# } at_load_${b# } status=$status" >> "$SUMMARY"
  done
fi

"$PY" "$TMP/noise.py" "$SUMMARY" "$pairs" > "$OUT/noise.txt" 2>> "$LOGS/noise.log"
cat "$OUT/noise.txt" >> "$SUMMARY"

# ---- g. summary
echo
cat "$SUMMARY"
if grep -q 'status=FAIL' "$SUMMARY" || ! grep -q '^RESULT ' "$SUMMARY"; then
  echo "gpu_check: FAIL (details in $LOGS)"
  exit 1
fi
echo "gpu_check: PASS"
