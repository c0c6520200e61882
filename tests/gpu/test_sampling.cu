// Argmax and top-k over a vocabulary shard against a straightforward host ranking (larger value
// first, ties by lower index, NaN above everything), exact: the values are exactly representable
// in every dtype and the kernels only compare them.
#include <algorithm>
#include <numeric>
#include <random>

#include "gpu_test_util.h"
#include "kernels/sampling.cuh"

namespace k = llama2::kernels;
using namespace llama2::gputest;

namespace {

bool ranks_before(float a, int ia, float b, int ib) {
  const bool an = std::isnan(a), bn = std::isnan(b);
  if (an || bn) return an && (!bn || ia < ib);
  if (a != b) return a > b;
  return ia < ib;
}

struct SampleCase {
  int rows, vocab_local, vocab_begin, k;
  bool ties;  // values on a coarse grid: many equal values, also at the k-th place
};

// [rows, ld] logits; columns >= vocab_local are padding the kernels must ignore (+inf).
std::vector<float> make_logits(const SampleCase& c, int ld, uint32_t seed) {
  std::vector<float> x = exact_random(static_cast<size_t>(c.rows) * ld, seed, -8.f, 8.f);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(0, c.vocab_local - 1);
  for (int r = 0; r < c.rows; ++r) {
    float* row = x.data() + static_cast<size_t>(r) * ld;
    if (c.ties) {
      for (int j = 0; j < c.vocab_local; ++j) row[j] = std::round(row[j] * 4.f) / 4.f;  // 65 levels
    }
    for (int i = 0; i < 3; ++i) row[pick(rng)] = -INFINITY;
    row[pick(rng)] = -0.f;
    for (int j = c.vocab_local; j < ld; ++j) row[j] = INFINITY;
  }
  return x;
}

std::vector<int> ranking(const float* row, int n) {
  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return ranks_before(row[a], a, row[b], b); });
  return order;
}

}  // namespace

TEST_CASE("argmax and top-k over a vocab shard: order, ties, padding, NaN") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const std::vector<SampleCase> cases = {
      {1, 111, 0, 5, false},    {19, 32000, 16000, 64, false}, {19, 32000, 0, 50, true},
      {3, 16000, 7, 1, true},   {2, 50, 3, 64, false},         {64, 32000, 0, 40, true},
      {5, 4000, 100, 64, true},
  };
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const SampleCase& c = cases[ci];
    const int ld = c.vocab_local + 3;
    std::vector<float> x = make_logits(c, ld, 500 + ci);
    if (ci == 1) {  // NaN must surface: it ranks first, the lower index of two first
      x[static_cast<size_t>(4) * ld + 100] = NAN;
      x[static_cast<size_t>(4) * ld + 7] = NAN;
    }
    std::vector<int32_t> want_arg(c.rows), want_idx(static_cast<size_t>(c.rows) * c.k, -1);
    std::vector<float> want_argval(c.rows), want_val(static_cast<size_t>(c.rows) * c.k, -INFINITY);
    for (int r = 0; r < c.rows; ++r) {
      const float* row = x.data() + static_cast<size_t>(r) * ld;
      const auto order = ranking(row, c.vocab_local);
      want_arg[r] = c.vocab_begin + order[0];
      want_argval[r] = row[order[0]];
      for (int j = 0; j < std::min(c.k, c.vocab_local); ++j) {
        want_idx[static_cast<size_t>(r) * c.k + j] = c.vocab_begin + order[j];
        want_val[static_cast<size_t>(r) * c.k + j] = row[order[j]];
      }
    }
    std::ostringstream shape_s;
    shape_s << "[rows=" << c.rows << " vocab_local=" << c.vocab_local
            << " vocab_begin=" << c.vocab_begin << " k=" << c.k << (c.ties ? " ties" : "") << "]";
    for_each_dtype([&](auto tag) {
      using T = decltype(tag);
      DeviceBuffer<T> d_x(to_dtype<T>(x));
      {
        const std::string what = label<T>("argmax", shape_s.str());
        INFO(what);
        DeviceBuffer<float> d_val(c.rows);
        DeviceBuffer<int32_t> d_idx(c.rows);
        d_val.poison();
        d_idx.poison();
        LLAMA2_CUDA_REQUIRE(k::launch_argmax<T>(d_x.get(), ld, c.rows, c.vocab_local, c.vocab_begin,
                                                d_val.get(), d_idx.get(), 0));
        LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
        CHECK_MESSAGE(d_idx.download() == want_arg, what << ": indices differ");
        expect_close(what + " values", d_val.download(), want_argval, Tol{0, 0});
      }
      {
        const std::string what = label<T>("topk", shape_s.str());
        INFO(what);
        DeviceBuffer<float> d_val(want_val.size());
        DeviceBuffer<int32_t> d_idx(want_idx.size());
        d_val.poison();
        d_idx.poison();
        LLAMA2_CUDA_REQUIRE(k::launch_topk<T>(d_x.get(), ld, c.rows, c.vocab_local, c.vocab_begin,
                                              c.k, d_val.get(), d_idx.get(), 0));
        LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
        const auto got_idx = d_idx.download();
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < got_idx.size(); ++i) {
          if (got_idx[i] != want_idx[i] && bad++ == 0) first = i;
        }
        CHECK_MESSAGE(bad == 0, what << ": " << bad << " indices differ; first at [row "
                                     << first / c.k << ", rank " << first % c.k << "] got "
                                     << got_idx[first] << " want " << want_idx[first]);
        expect_close(what + " values", d_val.download(), want_val, Tol{0, 0});
      }
    });
  }
}

TEST_CASE("top-k: k outside [1, 64] is refused") {
  LLAMA2_GPU_TEST_OR_SKIP();
  DeviceBuffer<float> buf(128);
  DeviceBuffer<int32_t> idx(128);
  CHECK(k::launch_topk<float>(buf.get(), 128, 1, 128, 0, 65, buf.get(), idx.get(), 0) ==
        cudaErrorInvalidValue);
  CHECK(k::launch_topk<float>(buf.get(), 128, 1, 128, 0, 0, buf.get(), idx.get(), 0) ==
        cudaErrorInvalidValue);
}
