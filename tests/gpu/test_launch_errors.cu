// A launcher that refuses its arguments says which check failed, and CUDA_CHECK (the rank layer's
// path to the user) prints it instead of a bare "invalid argument".
// The shape refusals happen on the host before any CUDA call, so those cases run without a
// device too; the alignment case needs real device buffers and skips without one.
#include <string>

#include "common/check.h"
#include "gpu_test_util.h"
#include "kernels/attention_decode.cuh"
#include "kernels/attention_prefill.cuh"
#include "kernels/gemm_w8a16.cuh"
#include "kernels/gemv.cuh"
#include "kernels/rmsnorm.cuh"

namespace k = llama2::kernels;
using namespace llama2::gputest;

TEST_CASE("launch errors: a refused shape names the check and the values") {
  (void)llama2::take_launch_error();
  CHECK(k::launch_rmsnorm<float>(nullptr, nullptr, 4, 0, 1e-5f, nullptr, 0) ==
        cudaErrorInvalidValue);
  CHECK(llama2::take_launch_error() == "launch_rmsnorm: hidden > 0 failed (hidden 0)");
  CHECK(llama2::take_launch_error().empty());  // taking clears it

  CHECK(k::launch_gemv<__half>(nullptr, nullptr, nullptr, 9, 16, 64, 0) == cudaErrorInvalidValue);
  CHECK(llama2::take_launch_error() ==
        "launch_gemv_kind: M >= 1 && M <= kGemvMaxRows failed (M 9, allowed 1..8)");

  CHECK(k::launch_gemv<__half>(nullptr, nullptr, nullptr, 1, 16, 12, 0) == cudaErrorInvalidValue);
  CHECK(llama2::take_launch_error().find("K 12 must be a positive multiple of 8 (16 bytes)") !=
        std::string::npos);

  // head_dim is checked once there is work to do (num_seqs > 0); the pointers come after it.
  k::DecodeAttentionArgs<__half> a;
  a.cache = {nullptr, nullptr, 1, 1, 16, 96};
  a.q_stride = 96;
  a.max_blocks = 1;
  a.num_seqs = 1;
  a.heads = 1;
  a.max_context = 1;
  CHECK(k::launch_attention_decode(a, 0) == cudaErrorInvalidValue);
  CHECK(llama2::take_launch_error() ==
        "launch_attention_decode: d == 64 || d == 128 failed (head_dim 96 is not instantiated "
        "(64, 128))");

  // The mma prefill kernel's query-tile override takes 0 (automatic), 64 or 128.
  k::PrefillAttentionArgs<__half> pa;
  pa.cache = {nullptr, nullptr, 1, 1, 16, 128};
  pa.q_stride = 128;
  pa.max_blocks = 1;
  pa.num_seqs = 1;
  pa.heads = 1;
  pa.max_new_tokens = 1;
  pa.mma_query_tile = 96;
  CHECK(k::launch_attention_prefill(pa, 0) == cudaErrorInvalidValue);
  CHECK(llama2::take_launch_error() ==
        "launch_attention_prefill: a.mma_query_tile == 0 || a.mma_query_tile == 64 || "
        "a.mma_query_tile == 128 failed (mma_query_tile 96, allowed 0, 64, 128)");
}

TEST_CASE("launch errors: the W8A16 GEMM names its shape, tiling and workspace checks") {
  (void)llama2::take_launch_error();
  k::GemmW8A16Args<__half, int8_t> a;
  a.M = 64;
  a.N = 4096;
  a.K = 24;
  k::GemmW8A16Tiling t;
  t.bm = 64;
  t.k_tiles_per_split = 1;
  const k::GemmW8A16Workspace none;
  CHECK(k::launch_gemm_w8a16(a, t, none, 0) == cudaErrorInvalidValue);
  CHECK(llama2::take_launch_error() ==
        "launch_gemm_w8a16: a.K >= 16 && a.K % 16 == 0 failed (K 24 must be a positive multiple "
        "of 16 (16-byte pieces of a weight row))");

  a.K = 4096;  // 64 stages of 64
  t.bm = 48;
  CHECK(k::launch_gemm_w8a16(a, t, none, 0) == cudaErrorInvalidValue);
  CHECK(llama2::take_launch_error() ==
        "launch_gemm_w8a16: t.bm == 16 || t.bm == 32 || t.bm == 64 || t.bm == 128 failed (bm 48, "
        "allowed 16, 32, 64, 128)");

  t.bm = 64;
  t.k_tiles_per_split = 16;
  CHECK(k::launch_gemm_w8a16(a, t, none, 0) == cudaErrorInvalidValue);  // 1 x 16 of 64 stages
  CHECK(llama2::take_launch_error().find("(splits 1 x 16 stages for 64 stages of K)") !=
        std::string::npos);

  t.splits = 4;
  CHECK(k::launch_gemm_w8a16(a, t, none, 0) == cudaErrorInvalidValue);
  CHECK(llama2::take_launch_error().find("(split K needs 1048576 partial sums and 32 counters; "
                                         "the workspace has 0 and 0)") != std::string::npos);
}

TEST_CASE("launch errors: CUDA_CHECK reports the launcher's reason") {
  (void)llama2::take_launch_error();
  std::string what;
  try {
    CUDA_CHECK(k::launch_rmsnorm<float>(nullptr, nullptr, -1, 64, 1e-5f, nullptr, 0));
  } catch (const llama2::Error& e) {
    what = e.what();
  }
  INFO(what);
  CHECK(what.find("cudaErrorInvalidValue") != std::string::npos);
  CHECK(what.find("launch_rmsnorm: n_rows >= 0 failed (n_rows -1)") != std::string::npos);
  CHECK(llama2::take_launch_error().empty());  // CUDA_CHECK took it

  // A CUDA error that no launcher refused carries no stale reason.
  CHECK(k::launch_rmsnorm<float>(nullptr, nullptr, 1, 0, 1e-5f, nullptr, 0) ==
        cudaErrorInvalidValue);
  what.clear();
  try {
    CUDA_CHECK(cudaErrorMemoryAllocation);
  } catch (const llama2::Error& e) {
    what = e.what();
  }
  CHECK(what.find("cudaErrorMemoryAllocation") != std::string::npos);
  CHECK(what.find("launch_rmsnorm") == std::string::npos);
}

TEST_CASE("launch errors: a misaligned operand is named") {
  LLAMA2_GPU_TEST_OR_SKIP();
  (void)llama2::take_launch_error();
  DeviceBuffer<__half> x(64), w(64), y(64);
  CHECK_FALSE(k::gemv_fits<__half>(x.get() + 1, w.get(), 1, 8));
  CHECK(k::gemv_fits<__half>(x.get(), w.get(), 1, 8));
  CHECK(k::launch_gemv<__half>(x.get() + 1, w.get(), y.get(), 1, 1, 8, 0) == cudaErrorInvalidValue);
  CHECK(llama2::take_launch_error() ==
        "launch_gemv_kind: is_aligned(x, 16) && is_aligned(w, 16) failed (16-byte alignment)");
  LLAMA2_CUDA_REQUIRE(k::launch_gemv<__half>(x.get(), w.get(), y.get(), 1, 1, 8, 0));
  CHECK(llama2::take_launch_error().empty());  // an accepted launch records nothing
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
}
