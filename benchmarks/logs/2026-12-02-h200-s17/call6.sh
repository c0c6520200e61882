# Session 17, call 6: the GPU test files whose double reference became gpu_test_util.h's
# reference_xwt (test_quant.cu, test_gemm_w8a16.cu, test_gemm_skinny.cu), every case in them.
set -u
source benchmarks/node_call.sh
node_build llama2_gpu_tests
gpu_tests '*quantize_rows*,gemv_q*,Fp8Gemm*,*W8A16*,gemm_w8a16*,dequantize_rows*,*skinny*'
date -u >>"$O/env.txt"; pack; cat "$O/env.txt"
