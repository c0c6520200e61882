#!/usr/bin/env bash
# Held-out perplexity of one model under every backend / dtype / KV-cache dtype / rank count that
# the machine allows: the accuracy table of benchmarks/RESULTS.md ("Accuracy on trained weights").
#   usage: perplexity_matrix.sh LLAMA2 MODEL_DIR TEXT_FILE OUTDIR [ROW...]
#   ROW = BACKEND:DTYPE:KV:NP[:WEIGHTS], e.g. cuda:bf16:fp8:1 or cuda:fp16:auto:1:int8 (WEIGHTS is
#         --weight-dtype, default auto) (default: the CPU fp32 rows at 1 and 2 ranks,
#         and with a GPU the CUDA rows fp32, fp16, bf16, fp16 + fp8 KV, bf16 + fp8 KV at 1 rank).
# One JSON per row in OUTDIR (the command's --json output), and OUTDIR/table.md: perplexity and its
# difference from the first row (CPU fp32, 1 rank), with the command of each row.
set -uo pipefail
llama2=$1 model=$2 text=$3 out=$4
shift 4
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
rows=("$@")
if [[ ${#rows[@]} -eq 0 ]]; then
  rows=(cpu:fp32:auto:1 cpu:fp32:auto:2)
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    rows+=(cuda:fp32:auto:1 cuda:fp16:auto:1 cuda:bf16:auto:1 cuda:fp16:fp8:1 cuda:bf16:fp8:1)
  fi
fi
: > "$out/commands.txt"
for row in "${rows[@]}"; do
  IFS=: read -r backend dtype kv np wd <<< "$row"
  wd=${wd:-auto}
  cmd=(mpirun --bind-to none -np "$np" -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST
       -x NVSHMEM_DISABLE_NVLS "$llama2" perplexity --model "$model" --text-file "$text"
       --backend "$backend" --dtype "$dtype" --kv-cache-dtype "$kv" --weight-dtype "$wd" --json)
  echo "$row ${cmd[*]}" >> "$out/commands.txt"
  echo "== $row" >&2
  name="$backend-$dtype-kv$kv-np$np"
  [[ $wd != auto ]] && name+="-w$wd"
  timeout 600 "${cmd[@]}" > "$out/$name.json" 2> "$out/$name.err" ||
    echo "   FAILED: see $out/$name.err" >&2
done
python3 - "$out" "${rows[@]}" <<'PY'
import json, os, sys
out, rows = sys.argv[1], sys.argv[2:]
lines = ["| backend | dtype | weights | KV cache | ranks | perplexity | mean NLL | vs first row | tokens/s |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
base = None
for row in rows:
    backend, dtype, kv, np_, *rest = row.split(":")
    wd = rest[0] if rest else "auto"
    name = f"{backend}-{dtype}-kv{kv}-np{np_}" + (f"-w{wd}" if wd != "auto" else "")
    path = os.path.join(out, name + ".json")
    try:
        r = json.loads(open(path).read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        lines.append(f"| {backend} | {dtype} | {wd} | {kv} | {np_} | failed | | | |")
        continue
    if base is None:
        base = r["perplexity"]
    diff = r["perplexity"] - base
    lines.append(f"| {backend} | {r['dtype']} | {wd} | {r['kv_cache_dtype']} | {r['ranks']} | {r['perplexity']:.6f} | "
                 f"{r['mean_nll']:.7f} | {diff:+.2e} ({diff / base:+.1e} relative) | {r['tokens_per_s']:.0f} |")
open(os.path.join(out, "table.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
