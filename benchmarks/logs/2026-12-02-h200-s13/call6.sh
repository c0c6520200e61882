# Session 13, call 6: the GEMV kernel tests after the gemv_begin refactor (dedup), main at HEAD.
set -u
O=$OUT/r; mkdir -p $O
t0=$SECONDS
timeout 240 bash tests/gpu/node_build.sh llama2_gpu_tests > $O/build.log 2>&1
echo "build rc=$? $((SECONDS-t0)) s" > $O/env.txt
timeout 120 build-gpu/tests/llama2_gpu_tests --force-colors=0 -tc="gemv*,gemm_w8a16*,CudaLinear*,sampling*,argmax*" > $O/gpu_tests.log 2>&1
echo "gpu tests rc=$? $(grep -E '^\[doctest\] (test cases|assertions)' $O/gpu_tests.log | tr '\n' ' ') $((SECONDS-t0)) s" >> $O/env.txt
grep -B2 -A12 "ERROR\|FAILED" $O/gpu_tests.log | head -40 >> $O/env.txt
cat $O/env.txt
