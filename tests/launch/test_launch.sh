#!/usr/bin/env bash
# Tests of the launch surface (launch/llama2-mpirun, launch/gpu-check.sh, launch/slurm/*) with
# no GPU, no Slurm and no working MPI needed: fake nvidia-smi / srun / mpirun / llama2 scripts
# are written to a temporary directory. Prints "N passed, M failed" last; exit 1 on any failure.
#   usage: bash tests/launch/test_launch.sh
# shellcheck disable=SC2016  # single-quoted snippets are for the inner shells
# shellcheck source=tests/launch/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ============================================================================ syntax
for f in "$ROOT"/launch/*.sh "$MPIRUN_SH" "$RANK_SH" "$ROOT"/launch/slurm/*; do
  if bash -n "$f" 2>"$TMP/syntax.err"; then pass "bash -n ${f#"$ROOT"/}"; else fail "bash -n ${f#"$ROOT"/}: $(cat "$TMP/syntax.err")"; fi
done
for f in "$MPIRUN_SH" "$RANK_SH" "$CHECK" "$SBATCH"; do
  if [[ -x "$f" ]]; then pass "executable: ${f#"$ROOT"/}"; else fail "not executable: ${f#"$ROOT"/}"; fi
done

# ============================================================================ replica_map.sh
# m NAME VARS... -- FUNCTION ARGS... : call a replica_map function in a subshell (a fork, no
# exec: cheap) with VARS exported.
# shellcheck source=launch/slurm/replica_map.sh
source "$MAP"
m() { runv "$@"; }

# 2 nodes x 2 GPUs: 2 replicas, TP ranks 0/1 on GPUs 0/1 of each node.
for node in 0 1; do
  for lid in 0 1; do
    m "map2x2.n$node.l$lid" SLURM_NODEID=$node SLURM_NNODES=2 SLURM_LOCALID=$lid SLURM_NTASKS_PER_NODE=2 -- replica_task_info
    expect_rc "map2x2.n$node.l$lid" 0
    expect_out "map2x2.n$node.l$lid" "replica=$node tp_rank=$lid gpu=$lid output=results.replica$node.jsonl socket=/run/llama2/llama2.replica$node.sock"
  done
done
# Inside a per-node step SLURM_NODEID is 0 for every node: LLAMA2_REPLICA (set by the sbatch) wins.
m map.step SLURM_NODEID=0 SLURM_NNODES=1 SLURM_LOCALID=1 SLURM_NTASKS_PER_NODE=2 LLAMA2_REPLICA=1 LLAMA2_REPLICAS=2 -- replica_task_info
expect_out map.step "replica=1 tp_rank=1 gpu=1 output=results.replica1.jsonl"
m map.step_bad SLURM_NODEID=0 SLURM_NNODES=1 SLURM_LOCALID=0 SLURM_NTASKS_PER_NODE=2 LLAMA2_REPLICA=2 LLAMA2_REPLICAS=2 -- replica_index
expect_rc map.step_bad 1
expect_err map.step_bad "LLAMA2_REPLICA=2 is out of range"

# 1 node x 4 GPUs: one replica, TP ranks 0..3.
m map1x4 SLURM_NODEID=0 SLURM_NNODES=1 SLURM_LOCALID=3 SLURM_NTASKS_PER_NODE=4 -- replica_task_info
expect_out map1x4 "replica=0 tp_rank=3 gpu=3 output=results.replica0.jsonl socket=/run/llama2/llama2.replica0.sock"
m map1x4.cmds -- replica_step_commands 4 gpu07 -- batch --model /m --input p.jsonl --output /o/results.jsonl
expect_eq "map1x4.cmds: one step" "$(wc -l <"$TMP/map1x4.cmds.out")" 1
expect_out map1x4.cmds "srun --nodes=1 --ntasks=4 --ntasks-per-node=4 --nodelist=gpu07 --mpi=pmix --gpu-bind=none"
expect_out map1x4.cmds "--export=ALL,LLAMA2_REPLICA=0,LLAMA2_REPLICAS=1 llama2 batch --model /m --input p.jsonl --output /o/results.replica0.jsonl"

# File names.
files() {
  replica_output_file 1; replica_output_file 0 /data/out.jsonl; replica_output_file 2 out.txt
  replica_socket_path 3; replica_socket_path 1 /tmp/s.sock
  replica_input_file 1 2 /d/p.jsonl /o; replica_input_file 0 1 /d/p.jsonl /o
}
m map.files -- files
expect_eq "map.files" "$(tr '\n' ' ' <"$TMP/map.files.out")" \
  "results.replica1.jsonl /data/out.replica0.jsonl out.txt.replica2 /run/llama2/llama2.replica3.sock /tmp/s.replica1.sock /o/p.replica1-of-2.jsonl /d/p.jsonl "

# Per-node job steps for 2 nodes x 2 GPUs.
m map.cmds SLURM_JOB_ID=42 LLAMA2_LOG_DIR=/logs -- replica_step_commands 2 gpu01 gpu02 -- batch --model /m -i /d/p.jsonl -o /o/results.jsonl
expect_eq "map.cmds: two steps" "$(wc -l <"$TMP/map.cmds.out")" 2
expect_eq "map.cmds: replica 0" "$(sed -n 1p "$TMP/map.cmds.out")" \
  "srun --nodes=1 --ntasks=2 --ntasks-per-node=2 --nodelist=gpu01 --mpi=pmix --gpu-bind=none --kill-on-bad-exit=1 --job-name=llama2.replica0 --output=/logs/llama2-42.replica0.log --export=ALL,LLAMA2_REPLICA=0,LLAMA2_REPLICAS=2 llama2 batch --model /m -i /o/p.replica0-of-2.jsonl -o /o/results.replica0.jsonl"
expect_out map.cmds "--nodelist=gpu02"
expect_out map.cmds "-o /o/results.replica1.jsonl"
m map.serve LLAMA2_BIN=/opt/llama2 -- replica_step_commands 2 a b -- serve --model "/models/my model"
expect_out map.serve "/opt/llama2 serve --model /models/my\\ model --socket /run/llama2/llama2.replica1.sock"
m map.mpirun LLAMA2_LAUNCHER=mpirun LLAMA2_ROOT=/repo -- replica_step_commands 2 a b -- serve --model /m --socket=/s/x.sock
expect_out map.mpirun "env LLAMA2_REPLICA=1 LLAMA2_REPLICAS=2 /repo/launch/llama2-mpirun -n 2 --mpirun-arg --host --mpirun-arg b:2 -- serve --model /m --socket=/s/x.replica1.sock"
m map.launcher LLAMA2_LAUNCHER=ssh -- replica_step_commands 2 a -- serve
expect_rc map.launcher 1
expect_err map.launcher "LLAMA2_LAUNCHER='ssh'"

# Node lists, tasks per node, input split.
m map.expand -- replica_expand_nodelist "gpu[01-03,07],login1,r[8-10]x"
expect_eq "map.expand" "$(tr '\n' ' ' <"$TMP/map.expand.out")" "gpu01 gpu02 gpu03 gpu07 login1 r8x r9x r10x "
m map.expand_bad -- replica_expand_nodelist "a[1-2]b[3-4]"
expect_rc map.expand_bad 1
m map.tpn -- replica_tasks_per_node "4(x3)"
expect_eq "map.tpn: 4(x3)" "$(cat "$TMP/map.tpn.out")" 4
printf '{"custom_id":"1"}\n{"custom_id":"2"}\n\n{"custom_id":"3"}\n{"custom_id":"4"}\n{"custom_id":"5"}\n' >"$TMP/p.jsonl"
m map.split -- replica_split_input "$TMP/p.jsonl" 2 "$TMP/split"
expect_rc map.split 0
expect_eq "map.split: share 0" "$(tr -d '\n' <"$TMP/split/p.replica0-of-2.jsonl")" '{"custom_id":"1"}{"custom_id":"3"}{"custom_id":"5"}'
expect_eq "map.split: share 1" "$(tr -d '\n' <"$TMP/split/p.replica1-of-2.jsonl")" '{"custom_id":"2"}{"custom_id":"4"}'

# Bad inputs: a clear message and status 1.
m bad.localid SLURM_NODEID=0 SLURM_NNODES=1 SLURM_LOCALID=2 SLURM_NTASKS_PER_NODE=2 -- replica_task_info
expect_rc bad.localid 1
expect_err bad.localid "SLURM_LOCALID=2 is out of range: SLURM_NTASKS_PER_NODE=2 (local ids are 0..1; one task per GPU)"
m bad.nodeid SLURM_NODEID=2 SLURM_NNODES=2 SLURM_LOCALID=0 SLURM_NTASKS_PER_NODE=2 -- replica_index
expect_rc bad.nodeid 1
expect_err bad.nodeid "SLURM_NODEID=2 is out of range: SLURM_NNODES=2"
m bad.unset SLURM_NODEID=0 SLURM_NNODES=1 SLURM_LOCALID=0 -- replica_tp_rank
expect_rc bad.unset 1
expect_err bad.unset "SLURM_NTASKS_PER_NODE is not set"
m bad.word SLURM_NODEID=0 SLURM_NNODES=1 SLURM_LOCALID=x SLURM_NTASKS_PER_NODE=2 -- replica_tp_rank
expect_err bad.word "SLURM_LOCALID='x' is not a non-negative integer"
m bad.uneven -- replica_tasks_per_node "2,1"
expect_err bad.uneven "differs between nodes"

# ============================================================================ llama2-mpirun
FAKEBIN=$TMP/bin
mkdir -p "$FAKEBIN"
cat >"$FAKEBIN/fake-llama2" <<'EOF'
#!/usr/bin/env bash
echo "fake llama2 $*"
EOF
# A fake mpirun: prints its argv one per line, to check what is exec'ed (quoting included).
cat >"$FAKEBIN/fake-mpirun" <<'EOF'
#!/usr/bin/env bash
[[ ${1-} == --version ]] && { echo "mpirun (Open MPI) ${FAKE_OMPI_VERSION:-4.1.4}"; exit 0; }
printf '<%s>\n' "$@"
EOF
chmod +x "$FAKEBIN"/fake-*
# `mpirun` on the PATH of every mr run below is the fake (Open MPI 4.1.4 unless
# FAKE_OMPI_VERSION says otherwise): the commands expected do not depend on this machine's Open MPI
# (Debian 13's is 5).
mkdir -p "$FAKEBIN/ompi"
ln -s ../fake-mpirun "$FAKEBIN/ompi/mpirun"
L2=$FAKEBIN/fake-llama2
NO_SMI=$TMP/no-such-nvidia-smi

mr() {  # NAME VARS... -- ARGS... : llama2-mpirun with a fixed machine (no GPU, 8 cores, 1 NUMA node)
  local name=$1; shift
  local vars=()
  while [[ "$1" != "--" ]]; do vars+=("$1"); shift; done
  shift
  runv "$name" PATH="$FAKEBIN/ompi:$PATH" NVIDIA_SMI="$NO_SMI" LLAMA2_BIN="$L2" _LLAMA2_TEST_CORES=8 _LLAMA2_TEST_NUMA_NODES=1 "${vars[@]}" -- "$MPIRUN_SH" "$@"
}
mr mr.root _LLAMA2_TEST_UID=0 -- -n 2 --dry-run -- generate --model /m --prompt "a b"
expect_rc mr.root 0
expect_eq "mr.root: command" "$(cat "$TMP/mr.root.out")" \
  "mpirun -np 2 --allow-run-as-root --map-by slot --bind-to none --mca btl self,vader --mca oob_tcp_if_include lo -x NCCL_NVLS_ENABLE=0 -x TORCH_SYMM_MEM_DISABLE_MULTICAST=1 -x NVSHMEM_DISABLE_NVLS=1 -x NCCL_SOCKET_IFNAME=lo $RANK_SH $L2 generate --model /m --prompt a\\ b"
mr mr.user _LLAMA2_TEST_UID=1000 -- -n 2 --dry-run -- generate --model /m
expect_out mr.user "mpirun -np 2 "
expect_not_out mr.user "--allow-run-as-root"
expect_out mr.user "-x NCCL_NVLS_ENABLE=0"
mr mr.nvls1 NCCL_NVLS_ENABLE=1 -- --dry-run -- generate --model /m
expect_rc mr.nvls1 2
expect_err mr.nvls1 "NCCL_NVLS_ENABLE=1 refused"
expect_not_out mr.nvls1 "mpirun"
mr mr.nvls0 NCCL_NVLS_ENABLE=0 -- --dry-run -- generate --model /m
expect_rc mr.nvls0 0
mr mr.symm TORCH_SYMM_MEM_DISABLE_MULTICAST=0 -- --dry-run -- generate --model /m
expect_rc mr.symm 2
expect_err mr.symm "TORCH_SYMM_MEM_DISABLE_MULTICAST=0 refused"

# Default rank count: CUDA_VISIBLE_DEVICES, else nvidia-smi -L, else 1 with a note.
mr mr.cvd CUDA_VISIBLE_DEVICES=0,1,2 -- --dry-run -- generate
expect_out mr.cvd "mpirun -np 3 "
expect_out mr.cvd "-x CUDA_VISIBLE_DEVICES=0,1,2"
mr mr.nogpu -- --dry-run -- generate
expect_out mr.nogpu "mpirun -np 1 "
expect_err mr.nogpu "no GPU visible"
cat >"$FAKEBIN/smi-L" <<'EOF'
#!/usr/bin/env bash
[[ "$1" == -L ]] || exit 3
echo "GPU 0: NVIDIA H200 (UUID: GPU-aaaa)"
echo "GPU 1: NVIDIA H200 (UUID: GPU-bbbb)"
EOF
chmod +x "$FAKEBIN/smi-L"
mr mr.smi NVIDIA_SMI="$FAKEBIN/smi-L" -- --dry-run generate --model /m
expect_out mr.smi "mpirun -np 2 "
expect_out mr.smi "$L2 generate --model /m"

# Forwarding, binding, oversubscription.
mr mr.fwd NCCL_DEBUG=INFO NCCL_P2P_LEVEL=NVL LLAMA2_FOO=bar OMP_NUM_THREADS=4 CUDA_DEVICE_MAX_CONNECTIONS=1 UNRELATED=1 -- -n 2 --dry-run -- generate
for x in "-x NCCL_DEBUG=INFO" "-x NCCL_P2P_LEVEL=NVL" "-x LLAMA2_FOO=bar" "-x OMP_NUM_THREADS=4" "-x CUDA_DEVICE_MAX_CONNECTIONS=1" "-x TORCH_SYMM_MEM_DISABLE_MULTICAST=1" "-x NVSHMEM_DISABLE_NVLS=1"; do
  expect_out mr.fwd "$x"
done
expect_not_out mr.fwd "UNRELATED"
mr mr.numa _LLAMA2_TEST_NUMA_NODES=2 -- -n 2 --bind numa --dry-run -- generate
expect_out mr.numa "--map-by numa --bind-to numa"
mr mr.numa_many _LLAMA2_TEST_NUMA_NODES=2 -- -n 4 --bind numa --dry-run -- generate
expect_out mr.numa_many "--bind-to none"
expect_err mr.numa_many "4 ranks > 2 NUMA node(s)"
mr mr.over _LLAMA2_TEST_CORES=2 -- -n 4 --dry-run -- generate
expect_out mr.over "--oversubscribe"
mr mr.extra -- -n 2 --mpirun-arg --host --mpirun-arg node7:2 --dry-run -- batch --model /m
expect_out mr.extra "-x NVSHMEM_DISABLE_NVLS=1 --host node7:2 $RANK_SH $L2 batch --model /m"

# Where Open MPI may talk (--net) and the SIGKILL delay of serve (above the drain).
expect_not_out mr.extra "oob_tcp_if_include"      # --host names another node: TCP between hosts
expect_not_out mr.extra "NCCL_SOCKET_IFNAME"
expect_err mr.extra "--net auto: tcp (--host names node7)"
mr mr.hostlocal _LLAMA2_TEST_HOSTNAME=gpu1.example.org -- -n 2 --mpirun-arg --host --mpirun-arg gpu1:2 --dry-run -- generate
expect_out mr.hostlocal "--mca oob_tcp_if_include lo"
mr mr.slurm SLURM_JOB_ID=5 SLURM_JOB_NUM_NODES=2 -- -n 2 --dry-run -- generate
expect_not_out mr.slurm "oob_tcp_if_include"
expect_out mr.slurm "--mca btl self,vader"         # a TP group is one node whatever the job
expect_err mr.slurm "Slurm job 5: ranks may run on another node"
mr mr.slurm1 SLURM_JOB_ID=5 SLURM_JOB_NUM_NODES=1 SLURMD_NODENAME=gpu1 _LLAMA2_TEST_HOSTNAME=gpu1 -- -n 2 --dry-run -- generate
expect_out mr.slurm1 "--mca oob_tcp_if_include lo"
mr mr.netlocal SLURM_JOB_ID=5 -- -n 2 --net local --dry-run -- generate
expect_out mr.netlocal "--mca oob_tcp_if_include lo"
# Open MPI 5 (Debian 13): its runtime refuses a loopback-only out-of-band channel.
mr mr.ompi5 MPIRUN="$FAKEBIN/fake-mpirun" FAKE_OMPI_VERSION=5.0.7 _LLAMA2_TEST_UID=0 -- -n 2 --net local -- generate
expect_not_out mr.ompi5 "oob_tcp_if_include"
expect_out mr.ompi5 "<NCCL_SOCKET_IFNAME=lo>"
# ... and ends a job at once when a rank dies or fails: not so under the wrapper, which ends the job
# itself (supervised runs only: not in a --dry-run command, nor when the user chose, nor across
# hosts).
expect_out mr.ompi5 $'<--runtime-options>\n<recoverable,error-nonzero-status=false>'
mr mr.ompi5dry MPIRUN="$FAKEBIN/fake-mpirun" FAKE_OMPI_VERSION=5.0.7 -- -n 2 --net local --dry-run -- generate
expect_not_out mr.ompi5dry "recoverable"
mr mr.ompi5user MPIRUN="$FAKEBIN/fake-mpirun" FAKE_OMPI_VERSION=5.0.7 -- -n 2 --net local --mpirun-arg --disable-recovery -- generate
expect_not_out mr.ompi5user "recoverable"
mr mr.ompi5tcp MPIRUN="$FAKEBIN/fake-mpirun" FAKE_OMPI_VERSION=5.0.7 -- -n 2 --net tcp -- generate
expect_not_out mr.ompi5tcp "recoverable"
mr mr.nettcp -- -n 2 --net tcp --dry-run -- generate
expect_not_out mr.nettcp "oob_tcp_if_include"
mr mr.netbad -- -n 2 --net wifi --dry-run -- generate
expect_rc mr.netbad 2
expect_err mr.netbad "--net 'wifi': use auto, local or tcp"
mr mr.usermca OMPI_MCA_btl=self,tcp NCCL_SOCKET_IFNAME=ib0 -- -n 2 --mpirun-arg --mca --mpirun-arg oob_tcp_if_include --mpirun-arg eth0 --dry-run -- generate
expect_not_out mr.usermca "--mca btl"
expect_not_out mr.usermca "oob_tcp_if_include lo"
expect_out mr.usermca "-x NCCL_SOCKET_IFNAME=ib0"
mr mr.serve -- -n 2 --dry-run -- serve --model /m --socket /s --shutdown-timeout-ms 4500
expect_out mr.serve "--mca odls_base_sigkill_timeout 15 "
mr mr.servedef -- -n 2 --dry-run -- serve --model /m --socket /s
expect_out mr.servedef "--mca odls_base_sigkill_timeout 40 "
expect_not_out mr.root "odls_base_sigkill_timeout"   # generate: nothing to drain

# Real (non-dry) mode execs mpirun with the same argv; quoting survives.
mr mr.exec MPIRUN="$FAKEBIN/fake-mpirun" _LLAMA2_TEST_UID=0 -- -n 2 -q -- generate --prompt "it's a \"test\""
expect_rc mr.exec 0
expect_out mr.exec "<--allow-run-as-root>"
expect_out mr.exec "<NCCL_NVLS_ENABLE=0>"
expect_out mr.exec "<it's a \"test\">"
# Errors: no binary (127), no command (2), bad -n (2).
run mr.nobin env LLAMA2_BUILD="$TMP/nowhere" PATH=/usr/bin:/bin NVIDIA_SMI="$NO_SMI" "$MPIRUN_SH" -n 1 -- generate
expect_rc mr.nobin 127
expect_err mr.nobin "llama2 binary not found"
mr mr.nocmd -- -n 2 --dry-run
expect_rc mr.nocmd 2
mr mr.badn -- -n zero --dry-run -- generate
expect_rc mr.badn 2

# ============================================================================ gpu-check.sh
# The fake nvidia-smi prints canned files from $FAKE_SMI (a directory): header, gpus.csv (the
# --query-gpu fields gpu-check asks for, in its order), apps.csv, topo, and fails if "broken" exists.
cat >"$FAKEBIN/nvidia-smi" <<'EOF'
#!/usr/bin/env bash
d=${FAKE_SMI:?}
cat() { local l; while IFS= read -r l || [[ -n "$l" ]]; do printf '%s\n' "$l"; done <"$1"; }  # no exec
if [[ -e "$d/broken" ]]; then
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."; exit 9
fi
case "${1-}" in
  "") cat "$d/header" ;;
  -L) awk -F', ' '{ print "GPU " $1 ": " $3 " (UUID: " $2 ")" }' "$d/gpus.csv" ;;
  --query-gpu=*) cat "$d/gpus.csv" ;;
  --query-compute-apps=*) [[ -f "$d/apps.csv" ]] && cat "$d/apps.csv" ;;
  topo) cat "$d/topo" ;;
  *) echo "fake nvidia-smi: unexpected $*" >&2; exit 2 ;;
esac
exit 0
EOF
chmod +x "$FAKEBIN/nvidia-smi"

# make_node DIR LINK : two H200s joined by LINK (NV18, SYS, PHB ...)
make_node() {
  local d=$1 link=$2
  mkdir -p "$d"
  cat >"$d/header" <<'EOF'
+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |
+-----------------------------------------+------------------------+----------------------+
EOF
  printf '%s\n' "0, GPU-11111111-aaaa, NVIDIA H200, 143771, 512, 143259" \
                "1, GPU-22222222-bbbb, NVIDIA H200, 143771, 512, 143259" >"$d/gpus.csv"
  # As nvidia-smi 580 prints it, even into a pipe: the header underlined with ANSI escapes.
  printf '\t\033[4mGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\033[0m\n' >"$d/topo"
  {
    printf 'GPU0\t X \t%s\tNODE\t0-15\t0\t\tN/A\n' "$link"
    printf 'GPU1\t%s\t X \tSYS\t16-31\t1\t\tN/A\n' "$link"
    printf 'NIC0\tNODE\tSYS\t X \t\t\t\t\n\nLegend:\n\n  X    = Self\n  NV#  = Connection traversing a bonded set of # NVLinks\n\nNIC Legend:\n\n  NIC0: mlx5_0\n'
  } >>"$d/topo"
}
make_node "$TMP/nvlink" NV18
make_node "$TMP/pcie" SYS
make_node "$TMP/busy" NV18
echo "GPU-22222222-bbbb, 4242, python3, 128000" >"$TMP/busy/apps.csv"
sed -i 's/^1, \(.*\), 143771, 512, 143259$/1, \1, 143771, 128771, 15000/' "$TMP/busy/gpus.csv"
make_node "$TMP/broken" NV18
touch "$TMP/broken/broken"

# A fake llama2 whose `plan --json` says: 13 GB of weights, 400 KiB KV per token, 8 GiB reserve.
cat >"$FAKEBIN/plan-llama2" <<'EOF'
#!/usr/bin/env bash
[[ "$1" == plan ]] || exit 2
echo "$*" >"${PLAN_ARGS_FILE:-/dev/null}"
if [[ -n "${FAKE_PLAN_JSON-}" ]]; then echo "$FAKE_PLAN_JSON"; exit "${FAKE_PLAN_RC:-1}"; fi
echo '{"model":"fake","tp":2,"max_seq_len":4096,"reserve_bytes":8589934592,"tp_valid":true,"weight_bytes_per_gpu":13016279040,"kv_bytes_per_token_per_gpu":409600,"fits":true,"invalid_tp_degrees":[{"tp":3,"reason":"x"}]}'
EOF
chmod +x "$FAKEBIN/plan-llama2"

gc() {  # NAME NODE_DIR VARS... -- ARGS...
  local name=$1 node=$2; shift 2
  local vars=()
  while [[ "$1" != "--" ]]; do vars+=("$1"); shift; done
  shift
  runv "$name" NVIDIA_SMI="$FAKEBIN/nvidia-smi" FAKE_SMI="$node" NVCC= LLAMA2_BIN="$FAKEBIN/plan-llama2" \
    NCCL_NVLS_ENABLE=0 "${vars[@]}" -- bash "$CHECK" "$@"
}
gc gc.nvlink "$TMP/nvlink" PLAN_ARGS_FILE="$TMP/plan.args" -- --preset 13b --max-seq-len 4096
expect_rc gc.nvlink 0
expect_out gc.nvlink "OK    visible GPUs: 2"
expect_out gc.nvlink "OK    driver 580.95.05, CUDA 13.0"
expect_out gc.nvlink "OK    tensor-parallel group: 2 rank(s) on GPU0,GPU1"
expect_out gc.nvlink "OK    topology: NVLink between GPU0-GPU1 NV18"
expect_out gc.nvlink "OK    memory GPU1: 139.9 GiB free >= 21.7 GiB needed"
expect_out gc.nvlink "OK    NCCL_NVLS_ENABLE=0"
expect_out gc.nvlink "      | GPU0"
expect_not_out gc.nvlink "WARN  "
expect_eq "gc.nvlink: plan asked at the GPU's size" "$(cat "$TMP/plan.args")" "plan --preset 13b --tp 2 --gpu-mem 143771MiB --json --max-seq-len 4096"
expect_eq "gc.nvlink: summary last" "$(tail -n 1 "$TMP/gc.nvlink.out")" "gpu-check: 9 OK, 0 WARN, 0 FAIL"
# The KV-cache dtype reaches the planner (fp8 halves the KV bytes it budgets per token).
gc gc.kvfp8 "$TMP/nvlink" PLAN_ARGS_FILE="$TMP/plan8.args" -- --preset 13b --kv-cache-dtype fp8
expect_rc gc.kvfp8 0
expect_eq "gc.kvfp8: plan asked with the KV dtype" "$(cat "$TMP/plan8.args")" "plan --preset 13b --tp 2 --gpu-mem 143771MiB --json --kv-cache-dtype fp8"

gc gc.pcie "$TMP/pcie" -- --tp 2
expect_rc gc.pcie 0
expect_out gc.pcie "WARN  topology: GPU0-GPU1 connected over SYS (PCIe/CPU, no NVLink)"
gc gc.pcie1 "$TMP/pcie" -- --tp 1
expect_out gc.pcie1 "OK    topology: one GPU"
gc gc.cvd "$TMP/pcie" CUDA_VISIBLE_DEVICES=GPU-2222 -- 
expect_out gc.cvd "OK    visible GPUs: 1 (CUDA_VISIBLE_DEVICES=GPU-2222) — GPU1 NVIDIA H200"
expect_not_out gc.cvd "WARN  topology"

gc gc.busy "$TMP/busy" -- 
expect_rc gc.busy 0
expect_out gc.busy "WARN  GPU1 busy: pid 4242 (python3) holds 128000 MiB"
gc gc.busy_mem "$TMP/busy" -- --model /models/x
expect_rc gc.busy_mem 1
expect_out gc.busy_mem "OK    memory GPU0"
expect_out gc.busy_mem "FAIL  memory GPU1: 14.6 GiB free < 21.7 GiB needed"

gc gc.nofit "$TMP/nvlink" FAKE_PLAN_JSON='{"tp":1,"max_seq_len":4096,"reserve_bytes":8589934592,"tp_valid":true,"weight_bytes_per_gpu":137953296384,"kv_bytes_per_token_per_gpu":327680,"fits":false,"shortfall_bytes":61986062336,"smallest_fitting_tp":2}' -- --preset 70b --tp 1
expect_rc gc.nofit 1
expect_out gc.nofit "FAIL  memory: preset 70b does not fit at tp 1 on 143771 MiB GPUs: needs 137.7 GiB per GPU"
expect_out gc.nofit "short by 57.7 GiB; smallest TP degree that fits: 2"
gc gc.badtp "$TMP/nvlink" FAKE_PLAN_JSON='{"tp":2,"tp_valid":false,"tp_invalid_reason":"num_key_value_heads (5) is not divisible by 2","weight_bytes_per_gpu":null,"fits":false,"valid_tp_degrees":[1,5]}' -- --model /m --tp 2
expect_rc gc.badtp 1
expect_out gc.badtp "FAIL  memory: --tp 2 is not valid for /m: num_key_value_heads (5) is not divisible by 2 (valid: 1,5)"
gc gc.planerr "$TMP/nvlink" FAKE_PLAN_JSON= LLAMA2_BIN=/bin/false -- --model /m
expect_rc gc.planerr 1
expect_out gc.planerr "FAIL  memory: llama2 plan --model /m --tp 2 --gpu-mem 143771MiB --json failed (exit 1)"
gc gc.tp4 "$TMP/nvlink" -- --tp 4
expect_rc gc.tp4 1
expect_out gc.tp4 "FAIL  --tp 4 but only 2 GPU(s) visible"
gc gc.nvls "$TMP/nvlink" NCCL_NVLS_ENABLE=1 --
expect_rc gc.nvls 1
expect_out gc.nvls "FAIL  NCCL_NVLS_ENABLE=1"
gc gc.nvls_unset "$TMP/nvlink" NCCL_NVLS_ENABLE=- --
expect_rc gc.nvls_unset 0
expect_out gc.nvls_unset "WARN  NCCL_NVLS_ENABLE unset"
gc gc.broken "$TMP/broken" --
expect_rc gc.broken 1
expect_out gc.broken "FAIL  nvidia-smi"
run gc.none env NVIDIA_SMI="$NO_SMI" bash "$CHECK" --preset 7b
expect_rc gc.none 1
expect_out gc.none "FAIL  no NVIDIA driver / nvidia-smi not found"
expect_eq "gc.none: no bash errors" "$(cat "$TMP/gc.none.err")" ""
run gc.usage bash "$CHECK" --bogus
expect_rc gc.usage 2

# The parsers on their own (sourcing runs nothing).
run gc.parse bash -c '
  source "$1"
  gc_parse_topo <"$2/topo"; echo "${GC_TOPO[0,1]} ${GC_TOPO[1,0]} ${GC_TOPO[0,0]} ${#GC_TOPO[@]}"
  gc_parse_gpus <"$2/gpus.csv"; echo "${#GC_IDX[@]} ${GC_NAME[1]} ${GC_FREE[1]}"
  j="{\"tp\":2,\"tp_invalid_reason\":null,\"reason\":\"a, b\",\"invalid_tp_degrees\":[{\"tp\":3}]}"
  echo "$(gc_json_field "$j" tp) $(gc_json_field "$j" tp_invalid_reason) [$(gc_json_field "$j" reason)]"
' _ "$CHECK" "$TMP/pcie"
expect_eq "gc.parse" "$(tr '\n' '|' <"$TMP/gc.parse.out")" "SYS SYS X 4|2 NVIDIA H200 143259|2 null [a, b]|"

# With the real llama2 (when built): its plan JSON feeds the memory check.
REAL=${LLAMA2_BIN_FOR_TESTS:-$ROOT/build/llama2}
if [[ -x "$REAL" ]]; then
  gc gc.real "$TMP/nvlink" LLAMA2_BIN="$REAL" -- --preset 70b --tp 2 --max-seq-len 4096
  expect_rc gc.real 0
  expect_out gc.real "OK    memory GPU0"
else
  echo "skip: $REAL not built; gpu-check with the real llama2 plan not exercised"
fi

# ============================================================================ llama2.sbatch
cat >"$FAKEBIN/srun" <<'EOF'
#!/usr/bin/env bash
node=""
for a in "$@"; do case "$a" in --nodelist=*) node=${a#--nodelist=} ;; esac; done
echo "srun[$node]: $*" >>"${FAKE_SRUN_LOG:?}"
[[ -n "$node" && "$node" == "${FAKE_SRUN_FAIL:-}" ]] && exit 3
exit 0
EOF
chmod +x "$FAKEBIN/srun"
sb() {  # NAME VARS... -- ARGS... : the sbatch script with a fake 2-node allocation
  local name=$1; shift
  local vars=()
  while [[ "$1" != "--" ]]; do vars+=("$1"); shift; done
  shift
  runv "$name" SLURM_JOB_NODELIST="gpu[1-2]" SLURM_NTASKS_PER_NODE=2 SLURM_GPUS_ON_NODE=2 SLURM_JOB_ID=7 \
    SLURM_SUBMIT_DIR="$TMP" LLAMA2_BIN="$L2" "${vars[@]}" -- bash "$SBATCH" "$@"
}
sb sb.dry LLAMA2_DRY_RUN=1 -- batch --model /m --input "$TMP/p.jsonl" --output "$TMP/out/results.jsonl"
expect_rc sb.dry 0
expect_out sb.dry "--nodelist=gpu1 --mpi=pmix --gpu-bind=none --kill-on-bad-exit=1 --job-name=llama2.replica0 --output=$TMP/llama2-7.replica0.log --export=ALL,LLAMA2_REPLICA=0,LLAMA2_REPLICAS=2 $L2 batch --model /m --input $TMP/out/p.replica0-of-2.jsonl --output $TMP/out/results.replica0.jsonl"
expect_out sb.dry "--nodelist=gpu2"
expect_err sb.dry "2 replica(s) x tensor-parallel 2"
sb sb.run PATH="$FAKEBIN:$PATH" FAKE_SRUN_LOG="$TMP/srun.log" SLURM_CPUS_ON_NODE=32 -- serve --model /m
expect_rc sb.run 0
expect_eq "sb.run: mkdir step + 2 replica steps" "$(wc -l <"$TMP/srun.log")" 3
if grep -q -- "--nodelist=gpu2 .*--cpus-per-task=16 .*serve --model /m --socket /run/llama2/llama2.replica1.sock" "$TMP/srun.log"; then
  pass "sb.run: replica 1 step"; else fail "sb.run: replica 1 step missing"; sed 's/^/    | /' "$TMP/srun.log"; fi
sb sb.fail PATH="$FAKEBIN:$PATH" FAKE_SRUN_LOG="$TMP/srun2.log" FAKE_SRUN_FAIL=gpu2 -- generate --model /m
expect_rc sb.fail 3
expect_err sb.fail "replica 1 (gpu2) failed with exit status 3"
expect_err sb.fail "replica 0 (gpu1) finished"
sb sb.nvls LLAMA2_DRY_RUN=1 NCCL_NVLS_ENABLE=1 -- generate --model /m
expect_rc sb.nvls 2
expect_err sb.nvls "NCCL_NVLS_ENABLE=1 refused"
sb sb.gpus LLAMA2_DRY_RUN=1 SLURM_GPUS_ON_NODE=1 -- generate --model /m
expect_rc sb.gpus 2
expect_err sb.gpus "2 tasks per node but only 1 GPU(s) per node"
sb sb.cmd LLAMA2_DRY_RUN=1 -- plan --model /m
expect_rc sb.cmd 2
# LLAMA2_LAYOUT=dp: one job step over both nodes, --tp = GPUs per node, one socket, one output.
sb sb.dp LLAMA2_DRY_RUN=1 LLAMA2_LAYOUT=dp -- serve --model /m --socket /run/x/x.sock
expect_rc sb.dp 0
expect_out sb.dp "srun --nodes=1 --ntasks=1 --nodelist=gpu1 mkdir -p -m 0700 /run/x"
expect_out sb.dp "srun --nodes=2 --ntasks=4 --ntasks-per-node=2 --mpi=pmix --gpu-bind=none --kill-on-bad-exit=1 --job-name=llama2.dp --export=ALL $L2 serve --model /m --socket /run/x/x.sock --tp 2"
sb sb.dp_batch LLAMA2_DRY_RUN=1 LLAMA2_LAYOUT=dp LLAMA2_LAUNCHER=mpirun -- batch --model /m -i in.jsonl -o out.jsonl --tp 1
expect_rc sb.dp_batch 0
expect_out sb.dp_batch "launch/llama2-mpirun -n 4 --mpirun-arg --host --mpirun-arg gpu1:2,gpu2:2 -- batch --model /m -i in.jsonl -o out.jsonl --tp 1"
sb sb.dp_gen LLAMA2_DRY_RUN=1 LLAMA2_LAYOUT=dp -- generate --model /m
expect_rc sb.dp_gen 2
expect_err sb.dp_gen "LLAMA2_LAYOUT=dp is for serve and batch"

echo "$PASSES passed, $FAILURES failed"
[[ $FAILURES -eq 0 ]]
