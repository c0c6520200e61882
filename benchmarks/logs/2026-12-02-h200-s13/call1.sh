# Session 13, call 1: measurements before changes (main 42c0688).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[[ $(id -u) -eq 0 ]] && export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
O=$OUT/r; mkdir -p $O
pack() { tar czf $OUT/all.tgz.tmp -C $O . 2>/dev/null && mv $OUT/all.tgz.tmp $OUT/all.tgz; }
{ date -u; git rev-parse HEAD; nvidia-smi -L; which ncu; } > $O/env.txt 2>&1
t0=$SECONDS
timeout 200 bash tests/gpu/node_build.sh llama2_gpu_tests llama2_bench_e2e llama2_bench_kernels > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
timeout 90 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc="gemm_w8a16*,*W8A16*,*w8a16*" > $O/tests_w8a16.log 2>&1
echo "tests w8a16 rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' $O/tests_w8a16.log | tr '\n' ' ') $((SECONDS-t0)) s" >> $O/env.txt; pack
timeout 100 build-gpu/llama2_bench_kernels w8a16 > $O/bench_w8a16.log 2>&1
echo "bench w8a16 rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
timeout 60 build-gpu/llama2_bench_kernels qgemv > $O/bench_qgemv.log 2>&1
echo "bench qgemv rc=$? $((SECONDS-t0)) s" >> $O/env.txt; pack
mpi() { timeout ${TL:-60} mpirun --bind-to none -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS "$@"; }
# Op profiles (eager, events): fp8 b1, fp16 b1, int8 b64 (both routes), fp8 b64, fp16 b64.
prof() { local name=$1; shift; mpi -x LLAMA2_OP_PROFILE=1 "$@" > $O/prof_$name.log 2>&1; echo "prof $name rc=$? $(grep 'op-profile' $O/prof_$name.log | tail -1) $((SECONDS-t0)) s" >> $O/env.txt; grep op-profile $O/prof_$name.log | tail -3 > $O/prof_$name.txt; rm -f $O/prof_$name.log; pack; }
prof fp16_b1 -np 1 build-gpu/llama2_bench_e2e --synthetic 7b --prompt-len 128 --prefill-lens "" --decode-steps 6 --warmup 2 --repeats 1 --batches 1
prof fp8_b1 -np 1 build-gpu/llama2_bench_e2e --synthetic 7b --weight-dtype fp8 --prompt-len 128 --prefill-lens "" --decode-steps 6 --warmup 2 --repeats 1 --batches 1
prof fp16_b64 -np 1 build-gpu/llama2_bench_e2e --synthetic 7b --prompt-len 128 --prefill-lens "" --decode-steps 6 --warmup 2 --repeats 1 --batches 64
prof fp8_b64 -np 1 build-gpu/llama2_bench_e2e --synthetic 7b --weight-dtype fp8 --prompt-len 128 --prefill-lens "" --decode-steps 6 --warmup 2 --repeats 1 --batches 64
prof int8_b64_rows0 -np 1 build-gpu/llama2_bench_e2e --synthetic 7b --weight-dtype int8 --prompt-len 128 --prefill-lens "" --decode-steps 6 --warmup 2 --repeats 1 --batches 64
prof int8_b64_rows256 -np 1 -x LLAMA2_W8A16_ROWS=256 build-gpu/llama2_bench_e2e --synthetic 7b --weight-dtype int8 --prompt-len 128 --prefill-lens "" --decode-steps 6 --warmup 2 --repeats 1 --batches 64
# ncu: every kernel of a few fp8 batch-1 decode steps, real clocks and warm caches (graphs off).
TL=200 mpi -np 1 ncu --clock-control none --cache-control none --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
  -k regex:"gemv|rope|decode_|rmsnorm|embedding|argmax|topk|sm90|cutlass|gemm|Kernel|xmma" \
  build-gpu/llama2_bench_e2e --synthetic 7b --weight-dtype fp8 --prompt-len 128 --prefill-lens "" --decode-steps 3 --warmup 0 --repeats 1 --batches 1 --no-cuda-graphs > $O/ncu_fp8_b1.csv 2>&1
echo "ncu fp8 b1 rc=$? $(wc -l < $O/ncu_fp8_b1.csv) lines $((SECONDS-t0)) s" >> $O/env.txt; gzip -f $O/ncu_fp8_b1.csv; pack
date -u >> $O/env.txt; pack; cat $O/env.txt
