#!/usr/bin/env bash
# gpu-check.sh — operator's checklist before starting llama2 on a GPU node. One line per check:
#   OK / WARN / FAIL (INFO lines and the indented topology matrix are context); a summary last.
#
#   launch/gpu-check.sh [--model DIR | --preset 7b|13b|70b] [--tp N] [--max-seq-len N] [--dtype D]
#                       [--kv-cache-dtype auto|fp8]
#
# Checks, in order:
#   1. nvidia-smi present and answering (FAIL "no NVIDIA driver / nvidia-smi not found" otherwise,
#      and nothing else is checked).
#   2. visible GPUs: count and names (nvidia-smi lists every GPU of the node; CUDA_VISIBLE_DEVICES,
#      by index or UUID, narrows the list as CUDA will); mixed models in the TP group: WARN.
#   3. driver and CUDA versions; WARN when the driver's CUDA is older than the toolkit's nvcc.
#   4. TP group = the first --tp visible GPUs (llama2: rank r drives visible device r); --tp larger
#      than the visible GPUs: FAIL. Default --tp: all visible GPUs.
#   5. processes already holding a GPU of the group (nvidia-smi --query-compute-apps): WARN each.
#   6. memory: with --model/--preset, `llama2 plan --json` (at --gpu-mem = the group's smallest
#      GPU) gives per GPU: weights + KV cache of one --max-seq-len sequence + reserve; FAIL when
#      the model cannot fit at that TP degree or a GPU has less free memory than that.
#   7. topology: `nvidia-smi topo -m` printed; WARN for any GPU pair of the group joined only
#      through PCIe / the CPU (PIX, PXB, PHB, NODE, SYS) instead of NVLink (NV#).
#   8. NCCL_NVLS_ENABLE: 0 OK; any other value FAIL (site policy: NVLink multicast off); unset
#      WARN (launch/llama2-mpirun, launch/slurm/llama2.sbatch and launch/env.sh set it to 0, a
#      bare mpirun does not).
# Exit status: 1 when any check FAILed, 0 otherwise (WARNs included); 2 usage error.
#
# Overrides (tests, odd installs): NVIDIA_SMI=path of nvidia-smi (a fake script that prints canned
# output works: see tests/launch/test_launch.sh), LLAMA2_BIN=llama2 binary (else build/llama2 of
# this repository, else PATH), NVCC=nvcc to compare versions with (empty: skip).
# Sourcing this file defines the gc_* functions without running anything, for tests.
set -uo pipefail

GC_SMI=${NVIDIA_SMI:-nvidia-smi}
GC_NOK=0 GC_NWARN=0 GC_NFAIL=0
gc_ok()   { GC_NOK=$((GC_NOK + 1));     printf 'OK    %s\n' "$*"; }
gc_warn() { GC_NWARN=$((GC_NWARN + 1)); printf 'WARN  %s\n' "$*"; }
gc_fail() { GC_NFAIL=$((GC_NFAIL + 1)); printf 'FAIL  %s\n' "$*"; }
gc_info() { printf 'INFO  %s\n' "$*"; }

# gc_human BYTES -> "12.3 GiB"; gc_human_to VAR BYTES sets VAR instead (no subshell: this
# script forks as little as it can). Non-numbers give "?".
gc_human_to() {
  if [[ ! "$2" =~ ^-?[0-9]+$ ]]; then printf -v "$1" '?'; return 0; fi
  local t=$((($2 * 10 + 536870912) / 1073741824))
  printf -v "$1" '%d.%d GiB' "$((t / 10))" "$((t < 0 ? -t % 10 : t % 10))"
}
gc_human() { local h; gc_human_to h "$1"; echo "$h"; }

# ---- parsers (stdin -> globals), testable with canned nvidia-smi output

# gc_parse_gpus: `nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free
# --format=csv,noheader,nounits` -> arrays GC_IDX GC_UUID GC_NAME GC_TOTAL GC_USED GC_FREE (MiB).
gc_parse_gpus() {
  GC_IDX=() GC_UUID=() GC_NAME=() GC_TOTAL=() GC_USED=() GC_FREE=()
  local idx uuid name total used free
  while IFS=, read -r idx uuid name total used free _; do
    [[ "$idx" =~ ^[0-9]+$ ]] || continue
    GC_IDX+=("$idx") GC_UUID+=("$uuid") GC_NAME+=("$name")
    GC_TOTAL+=("$total") GC_USED+=("$used") GC_FREE+=("$free")
  done < <(sed 's/\r$//; s/^[[:space:]]*//; s/[[:space:]]*$//; s/[[:space:]]*,[[:space:]]*/,/g')
}

# gc_parse_apps: `nvidia-smi --query-compute-apps=gpu_uuid,pid,process_name,used_memory
# --format=csv,noheader,nounits` -> arrays GC_APP_UUID GC_APP_PID GC_APP_NAME GC_APP_MEM.
gc_parse_apps() {
  GC_APP_UUID=() GC_APP_PID=() GC_APP_NAME=() GC_APP_MEM=()
  local uuid pid name mem
  while IFS=, read -r uuid pid name mem; do
    [[ "$uuid" == GPU-* || "$uuid" == MIG-* ]] || continue   # skips "No running processes found"
    GC_APP_UUID+=("$uuid") GC_APP_PID+=("$pid") GC_APP_NAME+=("$name") GC_APP_MEM+=("$mem")
  done < <(sed 's/\r$//; s/^[[:space:]]*//; s/[[:space:]]*$//; s/[[:space:]]*,[[:space:]]*/,/g')
}

# gc_parse_topo: `nvidia-smi topo -m` -> associative array GC_TOPO["i,j"] = X | NV# | PIX | PXB |
# PHB | NODE | SYS (nvidia-smi indices); GC_TOPO_TEXT = the matrix without the legend.
declare -A GC_TOPO=()
gc_parse_topo() {
  GC_TOPO=() GC_TOPO_TEXT=""
  local line header=() toks=() c row seen=0
  while IFS= read -r line; do
    [[ "$line" =~ ^[[:space:]]*Legend ]] && break
    read -ra toks <<<"$line"
    [[ ${#toks[@]} -gt 0 ]] || continue
    GC_TOPO_TEXT+="$line"$'\n'
    if [[ $seen -eq 0 ]]; then
      # Header: column names start with GPU0; a row has "X" (self) right after its label.
      if [[ "${toks[0]}" =~ ^GPU[0-9]+$ && "${toks[1]-}" != X ]]; then header=("${toks[@]}"); seen=1; fi
      continue
    fi
    [[ "${toks[0]}" =~ ^GPU([0-9]+)$ ]] || continue
    row=${BASH_REMATCH[1]}
    for ((c = 0; c < ${#header[@]}; c++)); do
      [[ "${header[c]}" =~ ^GPU([0-9]+)$ ]] || break   # GPU columns come first
      GC_TOPO["$row,${BASH_REMATCH[1]}"]=${toks[c + 1]-}
    done
  done < <(sed 's/\x1b\[[0-9;]*m//g; s/\r$//')   # no colour codes, no CRs
}

# gc_json_field JSON KEY -> the first value of "KEY" (number, true/false/null, or a string
# without its quotes); gc_json_to VAR JSON KEY sets VAR instead. Enough for llama2 plan's flat
# object (top-level keys come before the arrays of objects); no jq on the GPU nodes.
gc_json_to() {
  local re="\"$3\"[[:space:]]*:[[:space:]]*(\"[^\"]*\"|\\[[^]]*\\]|[^,}]*)" m=""
  if [[ "$2" =~ $re ]]; then   # bash matches leftmost: the first occurrence
    m=${BASH_REMATCH[1]}
    m=${m%"${m##*[![:space:]]}"}
    m=${m#[\"[]}
    m=${m%[\"\]]}
  fi
  printf -v "$1" '%s' "$m"
}
gc_json_field() { local v; gc_json_to v "$1" "$2"; printf '%s' "$v"; }

# gc_select_visible: GC_SEL = positions in the GC_* arrays that CUDA will see, in CUDA's order.
gc_select_visible() {
  GC_SEL=()
  local i e entries=() found
  if [[ -z "${CUDA_VISIBLE_DEVICES+x}" ]]; then
    for i in "${!GC_IDX[@]}"; do GC_SEL+=("$i"); done
    return 0
  fi
  IFS=, read -ra entries <<<"${CUDA_VISIBLE_DEVICES// /}"
  for e in "${entries[@]}"; do
    found=""
    if [[ "$e" == MIG-* ]]; then
      gc_warn "CUDA_VISIBLE_DEVICES entry $e is a MIG instance: llama2 expects whole GPUs"
      continue
    fi
    for i in "${!GC_IDX[@]}"; do
      if [[ "$e" =~ ^[0-9]+$ && "${GC_IDX[i]}" == "$((10#$e))" ]] || { [[ "$e" == GPU-* ]] && [[ "${GC_UUID[i]}" == "$e"* ]]; }; then
        found=$i; break
      fi
    done
    if [[ -z "$found" ]]; then
      # CUDA stops at the first entry it cannot resolve.
      gc_warn "CUDA_VISIBLE_DEVICES entry '$e' matches no GPU nvidia-smi lists; CUDA ignores it and every later entry"
      break
    fi
    GC_SEL+=("$found")
  done
}

gc_find_llama2_to() {  # VAR
  local root=${BASH_SOURCE[0]%/*}/..
  [[ "${BASH_SOURCE[0]}" == */* ]] || root=..
  if [[ -n "${LLAMA2_BIN-}" ]]; then printf -v "$1" '%s' "$LLAMA2_BIN"
  elif [[ -x "${LLAMA2_BUILD:-$root/build}/llama2" ]]; then printf -v "$1" '%s' "${LLAMA2_BUILD:-$root/build}/llama2"
  else printf -v "$1" '%s' "$(command -v llama2 2>/dev/null)"
  fi
}

gc_usage() { sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

gc_main() {
  local model="" preset="" tp="" max_seq="" dtype="" kv_dtype=""
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --model|-m|--preset|--tp|--max-seq-len|--dtype|--kv-cache-dtype)
        [[ $# -ge 2 ]] || { echo "gpu-check: $1 needs a value" >&2; return 2; } ;;
    esac
    case "$1" in
      --model|-m) model=$2; shift 2 ;;
      --model=*) model=${1#*=}; shift ;;
      --preset) preset=$2; shift 2 ;;
      --preset=*) preset=${1#*=}; shift ;;
      --tp) tp=$2; shift 2 ;;
      --tp=*) tp=${1#*=}; shift ;;
      --max-seq-len) max_seq=$2; shift 2 ;;
      --max-seq-len=*) max_seq=${1#*=}; shift ;;
      --dtype) dtype=$2; shift 2 ;;
      --dtype=*) dtype=${1#*=}; shift ;;
      --kv-cache-dtype) kv_dtype=$2; shift 2 ;;
      --kv-cache-dtype=*) kv_dtype=${1#*=}; shift ;;
      -h|--help) gc_usage; return 0 ;;
      *) echo "gpu-check: unknown argument '$1' (see --help)" >&2; return 2 ;;
    esac
  done
  if [[ -n "$model" && -n "$preset" ]]; then echo "gpu-check: give --model or --preset, not both" >&2; return 2; fi
  if [[ -n "$tp" && ! "$tp" =~ ^[1-9][0-9]*$ ]]; then echo "gpu-check: --tp '$tp': need a positive integer" >&2; return 2; fi

  # 1. nvidia-smi
  local smi_path out rc
  if ! smi_path=$(command -v "$GC_SMI" 2>/dev/null); then
    gc_fail "no NVIDIA driver / nvidia-smi not found ($GC_SMI): no GPU can be used on this machine"
    gc_summary; return 1
  fi
  out=$("$GC_SMI" 2>&1); rc=$?
  if [[ $rc -ne 0 ]]; then
    gc_fail "nvidia-smi ($smi_path) failed (exit $rc): $(printf '%s' "$out" | head -n 1) — NVIDIA driver not loaded or no GPU?"
    gc_summary; return 1
  fi
  gc_ok "nvidia-smi: $smi_path"

  # 2. GPUs
  gc_parse_gpus < <("$GC_SMI" --query-gpu=index,uuid,name,memory.total,memory.used,memory.free --format=csv,noheader,nounits 2>/dev/null)
  if [[ ${#GC_IDX[@]} -eq 0 ]]; then
    gc_fail "nvidia-smi lists no GPU"
    gc_summary; return 1
  fi
  gc_select_visible
  local n=${#GC_SEL[@]} i p desc=""
  for p in "${GC_SEL[@]}"; do desc+="${desc:+; }GPU${GC_IDX[p]} ${GC_NAME[p]} ${GC_TOTAL[p]} MiB"; done
  if [[ $n -eq 0 ]]; then
    gc_fail "no GPU visible to CUDA (CUDA_VISIBLE_DEVICES='${CUDA_VISIBLE_DEVICES-}'; nvidia-smi lists ${#GC_IDX[@]})"
    gc_summary; return 1
  fi
  gc_ok "visible GPUs: $n${CUDA_VISIBLE_DEVICES+ (CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES)} — $desc"

  # 3. versions
  local driver cuda tk=""
  driver="" cuda=""
  [[ "$out" =~ Driver\ Version:\ *([0-9][0-9.]*) ]] && driver=${BASH_REMATCH[1]}
  [[ "$out" =~ CUDA\ Version:\ *([0-9][0-9.]*) ]] && cuda=${BASH_REMATCH[1]}
  if [[ -n "$driver" ]]; then gc_ok "driver $driver, CUDA ${cuda:-unknown} (the newest CUDA this driver runs)"
  else gc_warn "driver version not found in nvidia-smi output"
  fi
  local nvcc=${NVCC-}
  if [[ -z "${NVCC+x}" ]]; then
    nvcc=${CUDACXX:-$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)}
  fi
  if [[ -n "$nvcc" && -x "$nvcc" ]]; then
    tk=$("$nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9][0-9.]*\).*/\1/p' | head -n 1)
  fi
  if [[ -n "$tk" && -n "$cuda" ]]; then
    if [[ "$(printf '%s\n%s\n' "$tk" "$cuda" | sort -V | head -n 1)" == "$tk" ]]; then
      gc_ok "CUDA toolkit $tk ($nvcc) <= driver CUDA $cuda"
    else
      gc_warn "CUDA toolkit $tk ($nvcc) is newer than the driver's CUDA $cuda: binaries built with it may not start (update the driver or install cuda-compat)"
    fi
  fi

  # 4. TP group
  local tp_n=${tp:-$n}
  if [[ $tp_n -gt $n ]]; then
    gc_fail "--tp $tp_n but only $n GPU(s) visible: one rank per GPU"
    tp_n=$n
  else
    local names="" g
    for ((i = 0; i < tp_n; i++)); do names+="${names:+,}GPU${GC_IDX[GC_SEL[i]]}"; done
    gc_ok "tensor-parallel group: $tp_n rank(s) on $names$([[ $tp_n -lt $n ]] && echo " ($n visible)")"
    for ((i = 1; i < tp_n; i++)); do
      g=${GC_SEL[i]}
      if [[ "${GC_NAME[g]}" != "${GC_NAME[GC_SEL[0]]}" ]]; then
        gc_warn "mixed GPUs in the TP group: GPU${GC_IDX[g]} is ${GC_NAME[g]}, GPU${GC_IDX[GC_SEL[0]]} is ${GC_NAME[GC_SEL[0]]}: the slowest sets the pace"
        break
      fi
    done
  fi
  local group=()
  for ((i = 0; i < tp_n; i++)); do group+=("${GC_SEL[i]}"); done

  # 5. processes holding the GPUs
  gc_parse_apps < <("$GC_SMI" --query-compute-apps=gpu_uuid,pid,process_name,used_memory --format=csv,noheader,nounits 2>/dev/null)
  local a busy=0
  for p in "${group[@]}"; do
    for a in "${!GC_APP_UUID[@]}"; do
      if [[ "${GC_APP_UUID[a]}" == "${GC_UUID[p]}" ]]; then
        gc_warn "GPU${GC_IDX[p]} busy: pid ${GC_APP_PID[a]} (${GC_APP_NAME[a]}) holds ${GC_APP_MEM[a]} MiB"
        busy=1
      fi
    done
  done
  [[ $busy -eq 1 ]] || gc_ok "no other compute process on the TP group's GPUs"

  # 6. memory vs llama2 plan
  if [[ -z "$model" && -z "$preset" ]]; then
    gc_info "memory: free $(for p in "${group[@]}"; do printf 'GPU%s %s MiB  ' "${GC_IDX[p]}" "${GC_FREE[p]}"; done)(give --model DIR or --preset to compare with what the model needs)"
  else
    gc_check_memory "$model" "$preset" "$tp_n" "$max_seq" "$dtype" "$kv_dtype" "${group[@]}"
  fi

  # 7. topology
  local topo
  if topo=$("$GC_SMI" topo -m 2>&1); then
    gc_parse_topo <<<"$topo"
    gc_info "topology (nvidia-smi topo -m):"
    printf '%s' "$GC_TOPO_TEXT" | sed 's/^/      | /'
    if [[ $tp_n -le 1 ]]; then
      gc_ok "topology: one GPU, no inter-GPU link used"
    else
      local j link slow=0 nv=""
      for ((i = 0; i < tp_n; i++)); do
        for ((j = i + 1; j < tp_n; j++)); do
          local a_i=${GC_IDX[group[i]]} a_j=${GC_IDX[group[j]]}
          link=${GC_TOPO["$a_i,$a_j"]-}
          if [[ "$link" =~ ^NV[0-9]+$ ]]; then
            nv+="${nv:+, }GPU$a_i-GPU$a_j $link"
          elif [[ -z "$link" ]]; then
            gc_warn "topology: no entry for GPU$a_i-GPU$a_j in nvidia-smi topo -m"; slow=1
          else
            gc_warn "topology: GPU$a_i-GPU$a_j connected over $link (PCIe/CPU, no NVLink): every all-reduce crosses it, expect much slower decode"
            slow=1
          fi
        done
      done
      [[ -z "$nv" ]] || gc_ok "topology: NVLink between $nv"
      [[ $slow -eq 1 || -n "$nv" ]] || gc_warn "topology: no GPU pair checked"
    fi
  else
    gc_warn "nvidia-smi topo -m failed: $(printf '%s' "$topo" | head -n 1)"
  fi

  # 8. site policy
  if [[ -z "${NCCL_NVLS_ENABLE+x}" ]]; then
    gc_warn "NCCL_NVLS_ENABLE unset here: launch/llama2-mpirun, launch/slurm/llama2.sbatch and launch/env.sh set it to 0; a bare mpirun would not (site policy: 0)"
  elif [[ "$NCCL_NVLS_ENABLE" == 0 ]]; then
    gc_ok "NCCL_NVLS_ENABLE=0 (NVLink multicast off, site policy)"
  else
    gc_fail "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE: site policy requires 0 (NVLink multicast off); unset it or set 0"
  fi

  gc_summary
  [[ $GC_NFAIL -eq 0 ]]
}

# gc_check_memory MODEL PRESET TP MAX_SEQ DTYPE KV_DTYPE GROUP_POSITIONS...
gc_check_memory() {
  local model=$1 preset=$2 tp=$3 max_seq=$4 dtype=$5 kv_dtype=$6
  shift 6
  local group=("$@") bin p min_total="" plan_args=() json err rc
  gc_find_llama2_to bin
  if [[ -z "$bin" || ! -x "$bin" ]]; then
    gc_warn "memory: llama2 binary not found (LLAMA2_BIN, build/llama2, PATH): cannot ask llama2 plan what the model needs"
    return 0
  fi
  for p in "${group[@]}"; do
    if [[ ! "${GC_TOTAL[p]}" =~ ^[0-9]+$ || ! "${GC_FREE[p]}" =~ ^[0-9]+$ ]]; then
      gc_warn "memory: nvidia-smi gives no memory figures for GPU${GC_IDX[p]} (total '${GC_TOTAL[p]}', free '${GC_FREE[p]}')"
      return 0
    fi
    if [[ -z "$min_total" || ${GC_TOTAL[p]} -lt $min_total ]]; then min_total=${GC_TOTAL[p]}; fi
  done
  if [[ -n "$model" ]]; then plan_args+=(--model "$model"); else plan_args+=(--preset "$preset"); fi
  plan_args+=(--tp "$tp" --gpu-mem "${min_total}MiB" --json)
  [[ -n "$max_seq" ]] && plan_args+=(--max-seq-len "$max_seq")
  [[ -n "$dtype" ]] && plan_args+=(--dtype "$dtype")
  [[ -n "$kv_dtype" ]] && plan_args+=(--kv-cache-dtype "$kv_dtype")
  err=$(mktemp)
  json=$("$bin" plan "${plan_args[@]}" 2>"$err"); rc=$?
  local errline=""
  while IFS= read -r errline; do [[ -z "${errline// /}" ]] || break; done <"$err"
  rm -f "$err"
  local what=${model:-preset $preset} weights kvtok reserve seq fits valid reason degrees
  gc_json_to weights "$json" weight_bytes_per_gpu
  gc_json_to valid "$json" tp_valid
  if [[ "$valid" == false ]]; then
    gc_json_to reason "$json" tp_invalid_reason
    gc_json_to degrees "$json" valid_tp_degrees
    gc_fail "memory: --tp $tp is not valid for $what: $reason${degrees:+ (valid: $degrees)}"
    return 0
  fi
  if [[ $rc -gt 1 || ! "$weights" =~ ^[0-9]+$ ]]; then
    gc_fail "memory: llama2 plan ${plan_args[*]} failed (exit $rc): ${errline:-no JSON on stdout}"
    return 0
  fi
  gc_json_to kvtok "$json" kv_bytes_per_token_per_gpu
  gc_json_to seq "$json" max_seq_len
  gc_json_to reserve "$json" reserve_bytes
  gc_json_to fits "$json" fits
  [[ "$seq" =~ ^[0-9]+$ ]] || seq=${max_seq:-0}
  [[ "$reserve" =~ ^[0-9]+$ ]] || reserve=0
  [[ "$kvtok" =~ ^[0-9]+$ ]] || kvtok=0
  local need=$((weights + kvtok * seq + reserve)) h_w h_kv h_r h_need h_free h_used detail
  gc_human_to h_w "$weights"; gc_human_to h_kv $((kvtok * seq)); gc_human_to h_r "$reserve"
  gc_human_to h_need "$need"
  detail="weights $h_w + KV $h_kv for one $seq-token sequence + reserve $h_r"
  if [[ "$fits" == false || $rc -eq 1 ]]; then
    local short smallest h_short=""
    gc_json_to short "$json" shortfall_bytes
    gc_json_to smallest "$json" smallest_fitting_tp
    [[ "$short" =~ ^[0-9]+$ ]] && gc_human_to h_short "$short"
    [[ "$smallest" =~ ^[0-9]+$ ]] || smallest=""
    gc_fail "memory: $what does not fit at tp $tp on ${min_total} MiB GPUs: needs $h_need per GPU ($detail)${h_short:+, short by $h_short}${smallest:+; smallest TP degree that fits: $smallest}"
    return 0
  fi
  local free_b
  for p in "${group[@]}"; do
    free_b=$((GC_FREE[p] * 1048576))
    gc_human_to h_free "$free_b"
    if [[ $free_b -ge $need ]]; then
      gc_ok "memory GPU${GC_IDX[p]}: $h_free free >= $h_need needed ($detail)"
    else
      gc_human_to h_used "$((${GC_USED[p]//[!0-9]/} * 1048576))"
      gc_fail "memory GPU${GC_IDX[p]}: $h_free free < $h_need needed ($detail); $h_used already in use"
    fi
  done
}

gc_summary() { echo "gpu-check: $GC_NOK OK, $GC_NWARN WARN, $GC_NFAIL FAIL"; }

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  gc_main "$@"
  exit $?
fi
