# shellcheck shell=bash
# replica_map.sh — how a Slurm allocation maps onto llama2 replicas, as pure bash functions.
# Sourced by launch/slurm/llama2.sbatch and by tests/launch/test_launch.sh; needs no Slurm.
#
# The model: tensor parallel INSIDE a node, data parallel ACROSS nodes.
#   - every node of the allocation is one independent replica (its own MPI world, its own rank 0,
#     its own output file / socket); replica index K = the node's position in the expanded node
#     list (= SLURM_NODEID of the job, 0-based);
#   - the G tasks of a node (G = SLURM_NTASKS_PER_NODE = GPUs per node) are the TP ranks
#     0..G-1 of that replica; TP rank = SLURM_LOCALID, GPU = SLURM_LOCALID (every task of the step
#     sees all G GPUs of its node; llama2 picks device = MPI shared-memory rank, which equals
#     SLURM_LOCALID and is cross-checked against it).
#   - Inside a per-node job step SLURM_NODEID is relative to the STEP (always 0), so the batch
#     script exports LLAMA2_REPLICA=K / LLAMA2_REPLICAS=N to the step; replica_index prefers them.
#
# Functions (all print to stdout; on bad input they print "replica_map: ..." to stderr and
# return 1 — they never exit, so they are safe to call from an interactive shell):
#   replica_tasks_per_node [VALUE]       G from SLURM_NTASKS_PER_NODE ("2", "2(x4)", "2,2")
#   replica_validate                     checks SLURM_NODEID/NNODES/LOCALID/NTASKS_PER_NODE
#   replica_index                        K   (LLAMA2_REPLICA, else SLURM_NODEID)
#   replica_tp_rank                      TP rank (SLURM_LOCALID)
#   replica_gpu_index                    GPU index on the node (SLURM_LOCALID)
#   replica_task_info                    one line: replica= tp_rank= gpu= output= socket=
#   replica_log_file K                   LLAMA2_LOG_DIR/llama2-<jobid>.replica<K>.log
#   replica_output_file K [PATH]         results.jsonl -> results.replica<K>.jsonl
#   replica_socket_path K [PATH]         /run/llama2/llama2.sock -> /run/llama2/llama2.replica<K>.sock
#   replica_input_file K N INPUT DIR     this replica's share of a batch input (INPUT when N = 1)
#   replica_split_input INPUT N DIR      writes the N shares (non-blank line i -> replica i mod N)
#   replica_expand_nodelist LIST         "gpu[01-03,07],login1" -> one host per line (pure bash;
#                                        prefer `scontrol show hostnames` where Slurm is installed)
#   replica_rewrite_args K N DIR ARGS... llama2 args for replica K -> array REPLICA_ARGS
#   replica_step_argv K N NODE G         job-step launcher prefix -> array REPLICA_STEP_ARGV
#   replica_step_cmd K N NODE G DIR ARGS...  the whole step command -> array REPLICA_CMD
#   replica_split_dir ARGS...            where input shares go (LLAMA2_SPLIT_DIR, else by --output)
#   replica_arg_value FLAG ARGS...       value of --flag / --flag=value (-i/-o/-m too) in ARGS
#   replica_quote ARGS...                one shell-quoted command line
#   replica_step_commands G NODE... -- LLAMA2 ARGS...
#                                        prints the per-node job-step commands, one per line
# Knobs read: LLAMA2_LAUNCHER (srun | mpirun, default srun), LLAMA2_SRUN_MPI (default pmix),
# LLAMA2_CPUS_PER_TASK, LLAMA2_LOG_DIR (per-replica step logs when N > 1), LLAMA2_ROOT
# (for the mpirun launcher: $LLAMA2_ROOT/launch/llama2-mpirun), LLAMA2_BIN.

REPLICA_DEFAULT_OUTPUT=results.jsonl
REPLICA_DEFAULT_SOCKET=/run/llama2/llama2.sock

replica__err() { echo "replica_map: $*" >&2; return 1; }

# replica_quote ARGS...: one shell-quoted line (plain words stay readable: no "\," noise).
replica_quote() {
  local a out=() q
  for a in "$@"; do
    if [[ -n "$a" && "$a" =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then out+=("$a"); else printf -v q '%q' "$a"; out+=("$q"); fi
  done
  echo "${out[*]}"
}

# replica__uint VAR NAME VALUE: VALUE must be a non-negative decimal integer; VAR = its value
# (leading zeros stripped, so that bash arithmetic never reads "08" as octal). No subshell.
replica__uint() {
  [[ -n "$3" ]] || { replica__err "$2 is not set"; return 1; }
  [[ "$3" =~ ^[0-9]+$ ]] || { replica__err "$2='$3' is not a non-negative integer"; return 1; }
  printf -v "$1" '%d' "$((10#$3))"
}

replica_tasks_per_node() {
  local v=${1-${SLURM_NTASKS_PER_NODE-}} first="" part n parts=()
  [[ -n "$v" ]] || { replica__err "SLURM_NTASKS_PER_NODE is not set (submit with --ntasks-per-node=GPUS_PER_NODE)"; return 1; }
  IFS=, read -ra parts <<<"$v"
  for part in "${parts[@]}"; do
    part=${part%%(x*)}             # Slurm's compressed form: "2(x4)" = 2 on each of 4 nodes
    replica__uint n SLURM_NTASKS_PER_NODE "$part" || return 1
    [[ -z "$first" ]] && first=$n
    [[ "$n" == "$first" ]] || { replica__err "SLURM_NTASKS_PER_NODE='$v' differs between nodes: every replica needs the same TP degree"; return 1; }
  done
  [[ "$first" -ge 1 ]] || { replica__err "SLURM_NTASKS_PER_NODE='$v': need at least 1 task per node"; return 1; }
  echo "$first"
}

replica_validate() {
  local node nnodes local_id g
  replica__uint node SLURM_NODEID "${SLURM_NODEID-}" || return 1
  replica__uint nnodes SLURM_NNODES "${SLURM_NNODES-}" || return 1
  replica__uint local_id SLURM_LOCALID "${SLURM_LOCALID-}" || return 1
  g=$(replica_tasks_per_node "${SLURM_NTASKS_PER_NODE-}") || return 1
  [[ $nnodes -ge 1 ]] || { replica__err "SLURM_NNODES=$nnodes: need at least one node"; return 1; }
  [[ $node -lt $nnodes ]] || { replica__err "SLURM_NODEID=$node is out of range: SLURM_NNODES=$nnodes (node ids are 0..$((nnodes - 1)))"; return 1; }
  [[ $local_id -lt $g ]] || { replica__err "SLURM_LOCALID=$local_id is out of range: SLURM_NTASKS_PER_NODE=$g (local ids are 0..$((g - 1)); one task per GPU)"; return 1; }
}

replica_index() {
  if [[ -n "${LLAMA2_REPLICA-}" ]]; then
    local k n
    replica__uint k LLAMA2_REPLICA "$LLAMA2_REPLICA" || return 1
    replica__uint n LLAMA2_REPLICAS "${LLAMA2_REPLICAS-${SLURM_NNODES-}}" || return 1
    [[ $k -lt $n ]] || { replica__err "LLAMA2_REPLICA=$k is out of range: $n replicas"; return 1; }
    echo "$k"
    return 0
  fi
  replica_validate || return 1
  echo $((10#$SLURM_NODEID))
}

replica_tp_rank() {
  local g id
  g=$(replica_tasks_per_node "${SLURM_NTASKS_PER_NODE-}") || return 1
  replica__uint id SLURM_LOCALID "${SLURM_LOCALID-}" || return 1
  [[ $id -lt $g ]] || { replica__err "SLURM_LOCALID=$id is out of range: SLURM_NTASKS_PER_NODE=$g (local ids are 0..$((g - 1)); one task per GPU)"; return 1; }
  echo "$id"
}

# The GPU index among the GPUs of the node that the step sees (all of them: --gpu-bind=none).
replica_gpu_index() { replica_tp_rank; }

# replica__suffixed PATH K EXT: a/b.EXT -> a/b.replicaK.EXT; a/b (other extension) -> a/b.replicaK
replica__suffixed() {
  local path=$1 k=$2 ext=$3
  if [[ "$path" == *".$ext" ]]; then
    echo "${path%."$ext"}.replica$k.$ext"
  else
    echo "$path.replica$k"
  fi
}

replica_output_file() {
  local k
  replica__uint k "replica index" "${1-}" || return 1
  replica__suffixed "${2:-$REPLICA_DEFAULT_OUTPUT}" "$k" jsonl
}

replica_socket_path() {
  local k
  replica__uint k "replica index" "${1-}" || return 1
  replica__suffixed "${2:-$REPLICA_DEFAULT_SOCKET}" "$k" sock
}

# replica_log_file K: the step log of replica K when there are several (LLAMA2_LOG_DIR, default .).
replica_log_file() {
  local k
  replica__uint k "replica index" "${1-}" || return 1
  echo "${LLAMA2_LOG_DIR:-.}/llama2-${SLURM_JOB_ID:-job}.replica$k.log"
}

replica_task_info() {
  local k r
  k=$(replica_index) || return 1
  r=$(replica_tp_rank) || return 1
  echo "replica=$k tp_rank=$r gpu=$r output=$(replica_output_file "$k") socket=$(replica_socket_path "$k")"
}

replica_input_file() {
  local k n input=$3 dir=${4:-.} base
  replica__uint k "replica index" "${1-}" || return 1
  replica__uint n "replica count" "${2-}" || return 1
  if [[ $n -le 1 ]]; then echo "$input"; return 0; fi
  base=${input##*/}
  base=${base%.jsonl}
  echo "${dir%/}/$base.replica$k-of-$n.jsonl"
}

# Round-robin over non-blank lines: deterministic for a given N, so a resumed job (same node
# count) gives each replica the same share and its --resume skips what it already wrote.
replica_split_input() {
  local input=$1 n dir=${3:-.} k
  replica__uint n "replica count" "${2-}" || return 1
  [[ -r "$input" ]] || { replica__err "--input $input: cannot read"; return 1; }
  mkdir -p "$dir" || { replica__err "cannot create $dir"; return 1; }
  local outs=()
  for ((k = 0; k < n; k++)); do outs+=("$(replica_input_file "$k" "$n" "$input" "$dir")"); done
  awk -v n="$n" -v files="$(printf '%s\n' "${outs[@]}")" '
    BEGIN { split(files, f, "\n"); for (i = 1; i <= n; i++) printf "" > f[i] }
    /[^ \t\r]/ { print > f[(c++ % n) + 1] }' "$input"
}

replica_expand_nodelist() {
  local list=${1-} item pre range post r lo hi width i
  local items=() depth=0 cur="" ch
  [[ -n "$list" ]] || { replica__err "empty node list"; return 1; }
  # Split at commas outside brackets.
  for ((i = 0; i < ${#list}; i++)); do
    ch=${list:i:1}
    case "$ch" in
      '[') depth=$((depth + 1)); cur+=$ch ;;
      ']') depth=$((depth - 1)); cur+=$ch ;;
      ',') if [[ $depth -eq 0 ]]; then items+=("$cur"); cur=""; else cur+=$ch; fi ;;
      *) cur+=$ch ;;
    esac
  done
  items+=("$cur")
  for item in "${items[@]}"; do
    [[ -n "$item" ]] || continue
    if [[ "$item" != *"["* ]]; then echo "$item"; continue; fi
    if [[ ! "$item" =~ ^([^][]*)\[([0-9,-]+)\]([^][]*)$ ]]; then
      replica__err "cannot expand '$item' (one [a-b,c] group per name is supported; use scontrol show hostnames)"
      return 1
    fi
    pre=${BASH_REMATCH[1]} range=${BASH_REMATCH[2]} post=${BASH_REMATCH[3]}
    local ranges=()
    IFS=, read -ra ranges <<<"$range"
    for r in "${ranges[@]}"; do
      if [[ "$r" =~ ^([0-9]+)-([0-9]+)$ ]]; then
        lo=${BASH_REMATCH[1]} hi=${BASH_REMATCH[2]}
      elif [[ "$r" =~ ^[0-9]+$ ]]; then
        lo=$r hi=$r
      else
        replica__err "bad range '$r' in '$item'"; return 1
      fi
      width=${#lo}
      [[ $((10#$lo)) -le $((10#$hi)) ]] || { replica__err "bad range '$r' in '$item'"; return 1; }
      for ((i = 10#$lo; i <= 10#$hi; i++)); do printf '%s%0*d%s\n' "$pre" "$width" "$i" "$post"; done
    done
  done
}

# replica_rewrite_args K N SPLIT_DIR LLAMA2_ARGS...: sets REPLICA_ARGS, the llama2 arguments for
# replica K of N: --output F -> F.replicaK.jsonl; --socket S -> S.replicaK.sock (serve gets
# /run/llama2/llama2.replicaK.sock when it has no --socket); --input I -> this replica's share
# in SPLIT_DIR when N > 1. Accepts "--flag value", "--flag=value" and -i/-o.
replica_rewrite_args() {
  local k n dir=${3:-.} cmd=${4-} a saw_socket=0
  replica__uint k "replica index" "${1-}" || return 1
  replica__uint n "replica count" "${2-}" || return 1
  shift 3
  REPLICA_ARGS=()
  while [[ $# -gt 0 ]]; do
    a=$1; shift
    case "$a" in
      -o|--output)
        [[ $# -gt 0 ]] || { replica__err "$a needs a value"; return 1; }
        REPLICA_ARGS+=("$a" "$(replica_output_file "$k" "$1")"); shift ;;
      --output=*) REPLICA_ARGS+=("--output=$(replica_output_file "$k" "${a#--output=}")") ;;
      --socket)
        [[ $# -gt 0 ]] || { replica__err "$a needs a value"; return 1; }
        saw_socket=1; REPLICA_ARGS+=("$a" "$(replica_socket_path "$k" "$1")"); shift ;;
      --socket=*) saw_socket=1; REPLICA_ARGS+=("--socket=$(replica_socket_path "$k" "${a#--socket=}")") ;;
      -i|--input)
        [[ $# -gt 0 ]] || { replica__err "$a needs a value"; return 1; }
        REPLICA_ARGS+=("$a" "$(replica_input_file "$k" "$n" "$1" "$dir")"); shift ;;
      --input=*) REPLICA_ARGS+=("--input=$(replica_input_file "$k" "$n" "${a#--input=}" "$dir")") ;;
      *) REPLICA_ARGS+=("$a") ;;
    esac
  done
  if [[ "$cmd" == serve && $saw_socket -eq 0 ]]; then
    REPLICA_ARGS+=(--socket "$(replica_socket_path "$k")")
  fi
}

# replica_arg_value FLAG ARGS...: the value of --flag / --flag=value in ARGS (empty if absent).
replica_arg_value() {
  local flag=$1 short=""; shift
  case "$flag" in --input) short=-i ;; --output) short=-o ;; --model) short=-m ;; esac
  while [[ $# -gt 0 ]]; do
    case "$1" in
      "$flag"=*) echo "${1#"$flag"=}"; return 0 ;;
      "$flag"|"${short:-$flag}") echo "${2-}"; return 0 ;;
    esac
    shift
  done
}

# replica_step_argv K N NODE G: sets REPLICA_STEP_ARGV, the command prefix that starts replica K's
# G ranks on NODE; the llama2 binary (srun) or the llama2 arguments (mpirun wrapper) follow it.
replica_step_argv() {
  local k n node=${3-} g launcher=${LLAMA2_LAUNCHER:-srun}
  replica__uint k "replica index" "${1-}" || return 1
  replica__uint n "replica count" "${2-}" || return 1
  replica__uint g "tasks per node" "${4-}" || return 1
  [[ -n "$node" ]] || { replica__err "no node name for replica $k"; return 1; }
  [[ $k -lt $n ]] || { replica__err "replica $k out of range: $n replicas"; return 1; }
  [[ $g -ge 1 ]] || { replica__err "need at least 1 task per node"; return 1; }
  case "$launcher" in
    srun)
      # --gpu-bind=none: every task sees all GPUs of its node, so CUDA IPC / NVLink P2P between
      # the ranks works even where Slurm constrains devices per task (with --gpus-per-task=1 each
      # rank would see one GPU and NCCL could fall back from NVLink to host memory).
      REPLICA_STEP_ARGV=(srun --nodes=1 --ntasks="$g" --ntasks-per-node="$g" --nodelist="$node"
        --mpi="${LLAMA2_SRUN_MPI:-pmix}" --gpu-bind=none --kill-on-bad-exit=1
        --job-name="llama2.replica$k")
      if [[ -n "${LLAMA2_CPUS_PER_TASK-}" ]]; then
        REPLICA_STEP_ARGV+=(--cpus-per-task="$LLAMA2_CPUS_PER_TASK")
      fi
      if [[ $n -gt 1 && -n "${LLAMA2_LOG_DIR-}" ]]; then
        REPLICA_STEP_ARGV+=(--output="$(replica_log_file "$k")")
      fi
      REPLICA_STEP_ARGV+=(--export="ALL,LLAMA2_REPLICA=$k,LLAMA2_REPLICAS=$n")
      ;;
    mpirun)
      # One mpirun per node from the batch host; Open MPI starts its daemon on NODE through
      # Slurm. The wrapper adds -x forwarding, root handling and binding.
      REPLICA_STEP_ARGV=(env "LLAMA2_REPLICA=$k" "LLAMA2_REPLICAS=$n")
      [[ -n "${LLAMA2_BIN-}" ]] && REPLICA_STEP_ARGV+=("LLAMA2_BIN=$LLAMA2_BIN")
      REPLICA_STEP_ARGV+=("${LLAMA2_ROOT:-.}/launch/llama2-mpirun" -n "$g"
        --mpirun-arg --host --mpirun-arg "$node:$g" --)
      ;;
    *) replica__err "LLAMA2_LAUNCHER='$launcher': use srun or mpirun"; return 1 ;;
  esac
}

# replica_step_cmd K N NODE G SPLIT_DIR LLAMA2_ARGS...: sets REPLICA_CMD, the whole command of
# replica K's job step (launcher prefix + llama2 + rewritten arguments).
replica_step_cmd() {
  local k=${1-} n=${2-} node=${3-} g=${4-} dir=${5:-.}
  shift 5 || { replica__err "usage: replica_step_cmd K N NODE G SPLIT_DIR LLAMA2_ARGS..."; return 1; }
  replica_step_argv "$k" "$n" "$node" "$g" || return 1
  replica_rewrite_args "$k" "$n" "$dir" "$@" || return 1
  if [[ "${LLAMA2_LAUNCHER:-srun}" == srun ]]; then
    REPLICA_CMD=("${REPLICA_STEP_ARGV[@]}" "${LLAMA2_BIN:-llama2}" "${REPLICA_ARGS[@]}")
  else
    REPLICA_CMD=("${REPLICA_STEP_ARGV[@]}" "${REPLICA_ARGS[@]}")  # the wrapper adds the binary
  fi
}

# replica_split_dir LLAMA2_ARGS...: where the input shares go: LLAMA2_SPLIT_DIR, else next to
# --output (a shared file system: every node reads its share from there).
replica_split_dir() {
  local out
  out=$(replica_arg_value --output "$@")
  echo "${LLAMA2_SPLIT_DIR:-$(dirname -- "${out:-./x}")}"
}

# replica_step_commands G NODE... -- LLAMA2 ARGS... : one line per node, shell-quoted, exactly
# what llama2.sbatch runs.
replica_step_commands() {
  local g=${1-} nodes=() k n dir
  shift || true
  while [[ $# -gt 0 && "$1" != "--" ]]; do nodes+=("$1"); shift; done
  [[ "${1-}" == "--" ]] || { replica__err "usage: replica_step_commands G NODE... -- LLAMA2_ARGS..."; return 1; }
  shift
  n=${#nodes[@]}
  [[ $n -ge 1 ]] || { replica__err "no nodes"; return 1; }
  dir=$(replica_split_dir "$@")
  for ((k = 0; k < n; k++)); do
    replica_step_cmd "$k" "$n" "${nodes[k]}" "$g" "$dir" "$@" || return 1
    replica_quote "${REPLICA_CMD[@]}"
  done
}

# replica_dp_step_cmd N G NODE... -- LLAMA2_ARGS... : the one job step of the data-parallel layout
# (LLAMA2_LAYOUT=dp): N nodes x G tasks in ONE MPI job, `--tp G` appended unless the arguments
# give --tp (a tensor-parallel group per node, N*G/T replicas behind world rank 0's one endpoint).
# Sets REPLICA_CMD; no per-replica files (one --output, one --socket).
replica_dp_step_cmd() {
  local n g nodes=() hosts="" node has_tp=0 a
  replica__uint n "node count" "${1-}" || return 1
  replica__uint g "tasks per node" "${2-}" || return 1
  shift 2
  while [[ $# -gt 0 && "$1" != "--" ]]; do nodes+=("$1"); shift; done
  [[ "${1-}" == "--" ]] || { replica__err "usage: replica_dp_step_cmd N G NODE... -- LLAMA2_ARGS..."; return 1; }
  shift
  [[ ${#nodes[@]} -eq $n ]] || { replica__err "$n nodes expected, ${#nodes[@]} given"; return 1; }
  for a in "$@"; do [[ "$a" == --tp || "$a" == --tp=* ]] && has_tp=1; done
  local args=("$@")
  [[ $has_tp -eq 1 ]] || args+=(--tp "$g")
  case "${LLAMA2_LAUNCHER:-srun}" in
    srun)
      REPLICA_CMD=(srun --nodes="$n" --ntasks=$((n * g)) --ntasks-per-node="$g"
        --mpi="${LLAMA2_SRUN_MPI:-pmix}" --gpu-bind=none --kill-on-bad-exit=1 --job-name=llama2.dp)
      [[ -n "${LLAMA2_CPUS_PER_TASK-}" ]] && REPLICA_CMD+=(--cpus-per-task="$LLAMA2_CPUS_PER_TASK")
      REPLICA_CMD+=(--export=ALL "${LLAMA2_BIN:-llama2}" "${args[@]}")
      ;;
    mpirun)
      for node in "${nodes[@]}"; do hosts+="${hosts:+,}$node:$g"; done
      REPLICA_CMD=(env)
      [[ -n "${LLAMA2_BIN-}" ]] && REPLICA_CMD+=("LLAMA2_BIN=$LLAMA2_BIN")
      REPLICA_CMD+=("${LLAMA2_ROOT:-.}/launch/llama2-mpirun" -n $((n * g))
        --mpirun-arg --host --mpirun-arg "$hosts" -- "${args[@]}")
      ;;
    *) replica__err "LLAMA2_LAUNCHER='${LLAMA2_LAUNCHER}': use srun or mpirun"; return 1 ;;
  esac
}
