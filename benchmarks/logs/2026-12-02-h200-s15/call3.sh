# Session 15, call 3 (final tree): whole GPU suite; 7B batch-1 A/B of the GEMV RoPE epilogue (LLAMA2_FUSE_ROPE 1 vs 0, two alternating runs); batches 16-128 and prefill; a batch-1 op profile.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/all.tgz.tmp -C $O . 2>/dev/null && mv $OUT/all.tgz.tmp $OUT/all.tgz; }
{ date -u; git log --oneline -1; git status --short | head; nvidia-smi -L; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 240 bash tests/gpu/node_build.sh llama2 llama2_gpu_tests llama2_bench_e2e > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
timeout 220 build-gpu/tests/llama2_gpu_tests --force-colors=0 > $O/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' $O/gpu_tests.log | tr '\n' ' ') $((SECONDS-t0)) s" >> $O/env.txt
grep -B2 -A12 "ERROR\|FAILED" $O/gpu_tests.log | head -60 >> $O/env.txt; pack
mpi() { timeout ${TL:-90} mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "$@"; }
e2e() { local name=$1 envs=$2; shift 2; local t1=$SECONDS; mpi -np 1 $envs build-gpu/llama2_bench_e2e --synthetic 7b --prompt-len 128 --decode-steps 64 --repeats 3 "$@" > $O/$name.log 2>&1; echo "$name: rc=$? $(grep -E 'batch +[0-9]+:|prefill' $O/$name.log | sed 's/ median of 3//' | tr '\n' ' ') [$((SECONDS-t1)) s] $((SECONDS-t0)) s" >> $O/env.txt; }
for r in 1 2; do
for W in auto fp8 int8; do
e2e ${W}_b1_rope1_$r "" --weight-dtype $W --batches 1 --prefill-lens ""
e2e ${W}_b1_rope0_$r "-x LLAMA2_FUSE_ROPE=0" --weight-dtype $W --batches 1 --prefill-lens ""
done
pack
done
e2e fp8_bs "" --weight-dtype fp8 --batches 16,32,64,128 --prefill-lens 512,2048
e2e fp16_bs "" --batches 64 --prefill-lens 2048
e2e int8_bs "" --weight-dtype int8 --batches 64 --prefill-lens 2048
pack
for W in fp8 auto; do
mpi -np 1 -x LLAMA2_OP_PROFILE=1 build-gpu/llama2_bench_e2e --synthetic 7b --weight-dtype $W --batches 1 --prompt-len 128 --decode-steps 3 --warmup 1 --repeats 1 --prefill-lens "" > $O/prof.log 2>&1
grep op-profile $O/prof.log | tail -1 > $O/prof_${W}_b1.txt; rm -f $O/prof.log
echo "prof $W b1: $(cat $O/prof_${W}_b1.txt) $((SECONDS-t0)) s" >> $O/env.txt
done
date -u >> $O/env.txt; pack; cat $O/env.txt
