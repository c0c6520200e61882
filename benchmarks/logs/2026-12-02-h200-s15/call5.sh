# Session 15, call 5: decode attention at batches 16-128 with short contexts, block vs warp kernel (LLAMA2_DECODE_KERNEL auto vs warp), fp8 and fp16 7B, 13B fp8; long contexts as the control.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/all.tgz.tmp -C $O . 2>/dev/null && mv $OUT/all.tgz.tmp $OUT/all.tgz; }
{ date -u; git log --oneline -1; git status --short | head; nvidia-smi -L; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 240 bash tests/gpu/node_build.sh llama2_bench_e2e > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
mpi() { timeout ${TL:-90} mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "$@"; }
e2e() { local name=$1 envs=$2; shift 2; local t1=$SECONDS; mpi -np 1 $envs build-gpu/llama2_bench_e2e --decode-steps 64 --repeats 3 --prefill-lens "" "$@" > $O/$name.log 2>&1; echo "$name: rc=$? $(grep -E 'batch +[0-9]+:' $O/$name.log | sed 's/ median of 3//;s/(//;s/)//' | awk '{print $3, $4}' | tr '\n' ' ') [$((SECONDS-t1)) s] $((SECONDS-t0)) s" >> $O/env.txt; }
for r in 1 2; do
for W in fp8 auto; do
e2e 7b_${W}_auto_$r "" --synthetic 7b --weight-dtype $W --batches 16,32,64,128 --prompt-len 128
e2e 7b_${W}_warp_$r "-x LLAMA2_DECODE_KERNEL=warp" --synthetic 7b --weight-dtype $W --batches 16,32,64,128 --prompt-len 128
done
pack
done
e2e 7b_fp8_auto_p1024 "" --synthetic 7b --weight-dtype fp8 --batches 16,32,64 --prompt-len 1024
e2e 7b_fp8_warp_p1024 "-x LLAMA2_DECODE_KERNEL=warp" --synthetic 7b --weight-dtype fp8 --batches 16,32,64 --prompt-len 1024
e2e 13b_fp8_auto "" --synthetic 13b --weight-dtype fp8 --batches 32,64,128 --prompt-len 128
e2e 13b_fp8_warp "-x LLAMA2_DECODE_KERNEL=warp" --synthetic 13b --weight-dtype fp8 --batches 32,64,128 --prompt-len 128
e2e 7b_fp8kv_auto "" --synthetic 7b --weight-dtype fp8 --kv-cache-dtype fp8 --batches 64 --prompt-len 128
e2e 7b_fp8kv_warp "-x LLAMA2_DECODE_KERNEL=warp" --synthetic 7b --weight-dtype fp8 --kv-cache-dtype fp8 --batches 64 --prompt-len 128
date -u >> $O/env.txt; pack; cat $O/env.txt
