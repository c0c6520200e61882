// The per-slice log-sum-exp kernel against the CPU reference (rank/logits_gather.h's
// slice_logsumexp, summed in double) on odd shapes, every dtype: the max and the target's logit
// exactly (the kernel only reads them), the sum of exponentials within fp32 summation error; and
// the combination of several slices equals one log-softmax over the whole row.
#include <cmath>

#include "gpu_test_util.h"
#include "kernels/logsumexp.cuh"
#include "rank/logits_gather.h"

namespace k = llama2::kernels;
using namespace llama2::gputest;

TEST_CASE("slice log-sum-exp: max, sum of exponentials and target logit per row") {
  LLAMA2_GPU_TEST_OR_SKIP();
  struct Case {
    int rows, vocab_local, vocab_begin;
  };
  const Case cases[] = {
      {1, 111, 0}, {19, 4096, 1024}, {7, 32000, 16000}, {3, 1, 5}, {512, 1024, 0}};
  for_each_dtype([&](auto zero) {
    using T = decltype(zero);
    for (const Case& c : cases) {
      const int ld = c.vocab_local + 5;  // padding columns the kernel must not read
      std::vector<float> x =
          exact_random(static_cast<size_t>(c.rows) * ld, 77 + c.rows, -12.f, 12.f);
      x = round_vec<T>(x);
      std::vector<int32_t> targets(c.rows);
      for (int r = 0; r < c.rows; ++r) {
        for (int j = c.vocab_local; j < ld; ++j) x[static_cast<size_t>(r) * ld + j] = 1e4f;
        // inside the slice, just outside on either side, and none
        const int kinds[] = {c.vocab_begin + (r * 37) % c.vocab_local, c.vocab_begin - 1,
                             c.vocab_begin + c.vocab_local, -1};
        targets[r] = kinds[r % 4];
      }
      if (c.rows > 2) x[static_cast<size_t>(2) * ld] = -INFINITY;  // contributes nothing
      // The reference reads dense rows [rows, vocab_local].
      std::vector<float> dense(static_cast<size_t>(c.rows) * c.vocab_local);
      for (int r = 0; r < c.rows; ++r) {
        std::copy_n(x.begin() + static_cast<size_t>(r) * ld, c.vocab_local,
                    dense.begin() + static_cast<size_t>(r) * c.vocab_local);
      }
      std::vector<float> want(static_cast<size_t>(c.rows) * 3);
      llama2::slice_logsumexp(dense.data(), c.rows, c.vocab_local, c.vocab_begin, targets.data(),
                              want.data());
      DeviceBuffer<T> d_x(to_dtype<T>(x));
      DeviceBuffer<int32_t> d_t(targets);
      DeviceBuffer<float> d_out(want.size());
      d_out.poison();
      LLAMA2_CUDA_REQUIRE(k::launch_slice_logsumexp<T>(d_x.get(), ld, c.rows, c.vocab_local,
                                                       c.vocab_begin, d_t.get(), d_out.get(), 0));
      LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
      const std::vector<float> got = d_out.download();
      std::vector<float> got_exact, want_exact, got_sum, want_sum;
      for (int r = 0; r < c.rows; ++r) {
        got_exact.insert(got_exact.end(), {got[3 * r], got[3 * r + 2]});
        want_exact.insert(want_exact.end(), {want[3 * r], want[3 * r + 2]});
        got_sum.push_back(got[3 * r + 1]);
        want_sum.push_back(want[3 * r + 1]);
      }
      const std::string shape = std::to_string(c.rows) + "x" + std::to_string(c.vocab_local);
      expect_close(label<T>("slice_logsumexp max/target", shape), got_exact, want_exact, Tol{});
      // fp32 exponentials (~2 ulp each) summed over ~V/256 terms per thread, then a tree: ~1e-6.
      expect_close(label<T>("slice_logsumexp sum", shape), got_sum, want_sum, Tol{1e-5, 0});
    }
  });
  // Null targets: the third field is 0.
  DeviceBuffer<float> d_x(std::vector<float>{1.f, 2.f, 3.f});
  DeviceBuffer<float> d_out(3);
  d_out.poison();
  LLAMA2_CUDA_REQUIRE(
      k::launch_slice_logsumexp<float>(d_x.get(), 3, 1, 3, 0, nullptr, d_out.get(), 0));
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  const std::vector<float> got = d_out.download();
  CHECK(got[0] == 3.f);
  CHECK(got[2] == 0.f);
  CHECK(std::fabs(got[1] - static_cast<float>(1 + std::exp(-1.0) + std::exp(-2.0))) < 1e-6);
  // Bad arguments are refused before launch.
  CHECK(k::launch_slice_logsumexp<float>(d_x.get(), 2, 1, 3, 0, nullptr, d_out.get(), 0) ==
        cudaErrorInvalidValue);
}
