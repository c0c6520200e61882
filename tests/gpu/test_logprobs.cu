// Logprobs as the CUDA runner computes them for a candidate step (cuda_model.cu,
// select_and_gather): each rank's vocabulary slice through the top-k kernel and the slice
// log-sum-exp kernel (no targets), merged and combined on the host (merge_candidates,
// lse_from_slices, row_logprobs), against a direct log-softmax of the same (dtype-rounded) logits
// in double. Two and three uneven slices of a 32000 vocabulary, every dtype.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "coordinator/scheduler/logprobs.h"
#include "gpu_test_util.h"
#include "kernels/logsumexp.cuh"
#include "kernels/sampling.cuh"
#include "rank/logits_gather.h"

namespace k = llama2::kernels;
using namespace llama2::gputest;

TEST_CASE("logprobs from per-rank top-k and slice log-sum-exp equal the direct log-softmax") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const int V = 32000, rows = 5, top_n = 20;
  for (const std::vector<int>& sizes :
       std::vector<std::vector<int>>{{15999, 16001}, {7, 31000, 993}}) {
    for_each_dtype([&](auto zero) {
      using T = decltype(zero);
      std::vector<float> x = round_vec<T>(exact_random(static_cast<size_t>(rows) * V, 11, -9, 9));
      x[static_cast<size_t>(1) * V + 31500] = 30.f;  // one dominant logit in the last slice
      std::vector<llama2::ShardPlan> shards;
      std::vector<float> values, lse_parts;
      std::vector<int32_t> ids;
      int begin = 0;
      for (size_t r = 0; r < sizes.size(); ++r) {
        llama2::ShardPlan s;
        s.tp = static_cast<int>(sizes.size());
        s.rank = static_cast<int>(r);
        s.vocab_begin = begin;
        s.vocab_size = sizes[r];
        begin += sizes[r];
        shards.push_back(s);
        std::vector<float> slice;  // [rows, vocab_local]
        for (int row = 0; row < rows; ++row) {
          const float* p = x.data() + static_cast<size_t>(row) * V + s.vocab_begin;
          slice.insert(slice.end(), p, p + s.vocab_size);
        }
        DeviceBuffer<T> d_x(to_dtype<T>(slice));
        DeviceBuffer<float> d_v(static_cast<size_t>(rows) * top_n), d_lse(rows * 3);
        DeviceBuffer<int32_t> d_i(static_cast<size_t>(rows) * top_n);
        LLAMA2_CUDA_REQUIRE(k::launch_topk<T>(d_x.get(), s.vocab_size, rows, s.vocab_size,
                                              s.vocab_begin, top_n, d_v.get(), d_i.get(), 0));
        LLAMA2_CUDA_REQUIRE(k::launch_slice_logsumexp<T>(
            d_x.get(), s.vocab_size, rows, s.vocab_size, s.vocab_begin, nullptr, d_lse.get(), 0));
        LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
        const auto v = d_v.download();
        const auto i = d_i.download();
        const auto l = d_lse.download();
        values.insert(values.end(), v.begin(), v.end());
        ids.insert(ids.end(), i.begin(), i.end());
        lse_parts.insert(lse_parts.end(), l.begin(), l.end());
      }
      llama2::StepLogits got;
      llama2::merge_candidates(values.data(), ids.data(), static_cast<int>(sizes.size()), rows,
                               top_n, &got);
      llama2::lse_from_slices(lse_parts.data(), shards, std::vector<int32_t>(rows, 1), &got);
      for (int row = 0; row < rows; ++row) {
        const float* p = x.data() + static_cast<size_t>(row) * V;
        double m = -INFINITY, sum = 0;
        for (int j = 0; j < V; ++j) m = std::max(m, static_cast<double>(p[j]));
        for (int j = 0; j < V; ++j) sum += std::exp(p[j] - m);
        const double lse = m + std::log(sum);
        std::vector<int> order(V);
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(),
                  [p](int a, int b) { return p[a] != p[b] ? p[a] > p[b] : a < b; });
        float lp = 0;
        std::vector<llama2::TopLogprob> top;
        llama2::row_logprobs(got, row, order[0], top_n, &lp, &top);
        std::vector<float> got_lp = {lp}, want_lp = {static_cast<float>(p[order[0]] - lse)};
        REQUIRE(top.size() == static_cast<size_t>(top_n));
        for (int j = 0; j < top_n; ++j) {
          CHECK(top[j].token == order[j]);
          got_lp.push_back(top[j].logprob);
          want_lp.push_back(static_cast<float>(p[order[j]] - lse));
        }
        // fp32 sums of exponentials on the GPU (~1e-6 relative): ~1e-6 absolute in the logprob.
        expect_close(label<T>("logprobs", std::to_string(sizes.size()) + " slices"), got_lp,
                     want_lp, Tol{0, 1e-5});
      }
    });
  }
}
