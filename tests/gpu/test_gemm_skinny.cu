// The skinny tensor-core GEMM (kernels/gemm_skinny.cu, y = x . W^T for M <= 64) against a
// double-precision CPU reference, fp16 and bf16 (the kernel has no fp32 form), on odd shapes: M
// across the three row paddings (16, 32, 64), N one 8-column piece past a 128-column tile, K with a
// partial last stage (K % 64 == 8, also a partial mma k-step), and every split count in
// {1, 2, 3, 8} plus the planned one, including more splits than K has stages (empty splits must
// add zero). Then: the same launch gives the same bits, the split planner's rules at Llama-2-7B
// shapes, and the refusals.
// Tolerance: x and w are bf16-exact, so every product is exact in fp32; the result differs from
// the exact sum only by the fp32 accumulation (mma, then the splits in order) and one rounding to
// T: |got - want| <= rel_tol<T>(1) |want| + 2^-16 sum_k |x w| (a wrong or misplaced k, or a split
// added twice, is off by whole products, far above that).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/check.h"
#include "gpu_test_util.h"
#include "kernels/gemm_skinny.cuh"

namespace k = llama2::kernels;
using namespace llama2::gputest;

namespace {

// for_each_dtype without fp32: the kernel's mma.sync takes only 16-bit operands.
template <typename F>
void for_each_16bit_dtype(F&& f) {
  f(__half{});
  f(__nv_bfloat16{});
}

std::string shape_text(int M, int N, int K, int splits) {
  return "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) +
         " splits=" + std::to_string(splits);
}

// The 16 bits of every element of y from element `begin` on that are not 0xffff (poison()'s).
template <typename T>
size_t count_written(const std::vector<T>& y, size_t begin) {
  size_t n = 0;
  for (size_t i = begin; i < y.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, &y[i], sizeof bits);
    n += bits != 0xffff;
  }
  return n;
}

// y [M + 2, N]: rows 0..M-1 within the tolerance of want/bound [M, N], the 2 guard rows after them
// still poisoned (the padded rows of the block's tile must never reach memory).
template <typename T>
void expect_result(const std::string& what, const std::vector<T>& y,
                   const std::vector<double>& want, const std::vector<double>& bound) {
  REQUIRE(y.size() > want.size());
  size_t bad = 0, worst = 0;
  double worst_ratio = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double got = k::to_float(y[i]);
    const double lim = rel_tol<T>(1) * std::fabs(want[i]) + 0x1p-16 * bound[i] + 1e-30;
    const double ratio = std::fabs(got - want[i]) / lim;
    if (!(ratio <= 1)) ++bad;  // NaN (an element never written: poison) counts
    if (!(ratio <= worst_ratio)) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << want.size() << " outside; worst ["
                               << worst << "] got " << k::to_float(y[worst]) << " want "
                               << want[worst] << " (" << worst_ratio << " x bound)");
  CHECK_MESSAGE(count_written(y, want.size()) == 0,
                what << ": elements written past row M-1 (guard rows lost their poison)");
}

}  // namespace

TEST_CASE("gemm_skinny: fp16 and bf16 against a double reference, odd shapes, split counts 1-8") {
  LLAMA2_GPU_TEST_OR_SKIP();
  LLAMA2_CUDA_REQUIRE(k::prepare_gemm_skinny());
  int sms = 0;
  LLAMA2_CUDA_REQUIRE(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // (N, K): K of 2, 17, 64 and 1 stages; (4096, 8) is one partial stage over 32 column tiles.
  const std::pair<int, int> shapes[] = {{136, 72}, {264, 1032}, {128, 4096}, {4096, 8}};
  uint32_t seed = 300;
  for (const auto& shape : shapes) {
    const int N = shape.first, K = shape.second;
    const int stages = static_cast<int>(k::ceil_div(K, k::kSkinnyBlockK));
    const auto wf = exact_random(size_t(N) * K, seed++);  // w [N, K]
    for (const int M : {1, 5, 16, 17, 33, 64}) {
      const auto xf = exact_random(size_t(M) * K, seed++);  // x [M, K]
      std::vector<double> want, bound;                      // [M, N]; one for both dtypes
      reference_xwt(xf, wf, M, N, K, &want, &bound);
      const int planned = k::plan_gemm_skinny_splits(M, N, K, sms);
      for_each_16bit_dtype([&](auto tag) {
        using T = decltype(tag);
        DeviceBuffer<T> x(to_dtype<T>(xf)), w(to_dtype<T>(wf));
        DeviceBuffer<T> y(size_t(M + 2) * N);  // [M + 2, N]: 2 poisoned guard rows
        for (const int splits : {1, 2, 3, 8, planned}) {
          // splits > stages: the launcher still takes it, the empty splits add zero.
          const std::string what =
              label<T>("gemm_skinny", shape_text(M, N, K, splits)) +
              (splits > stages ? " (more splits than the " + std::to_string(stages) + " stages)"
                               : std::string(splits == planned ? " (planned)" : ""));
          y.poison();
          const k::GemmSkinnyArgs<T> args{x.get(), w.get(), y.get(), M, N, K};
          LLAMA2_CUDA_REQUIRE(k::launch_gemm_skinny<T>(args, splits, nullptr));
          LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
          expect_result<T>(what, y.download(), want, bound);
        }
      });
    }
  }
}

TEST_CASE("gemm_skinny: the same launch gives the same bits every time") {
  LLAMA2_GPU_TEST_OR_SKIP();
  // The splits' partial sums meet through distributed shared memory in split order: a race there
  // shows as bits that change between runs, so one launch is repeated and compared bit for bit.
  const int M = 33, N = 264, K = 1032, splits = 3;
  const auto xf = exact_random(size_t(M) * K, 41), wf = exact_random(size_t(N) * K, 42);
  for_each_16bit_dtype([&](auto tag) {
    using T = decltype(tag);
    DeviceBuffer<T> x(to_dtype<T>(xf)), w(to_dtype<T>(wf)), y(size_t(M) * N);  // y [M, N]
    const k::GemmSkinnyArgs<T> args{x.get(), w.get(), y.get(), M, N, K};
    std::vector<T> first;
    for (int run = 0; run < 10; ++run) {
      y.poison();
      LLAMA2_CUDA_REQUIRE(k::launch_gemm_skinny<T>(args, splits, nullptr));
      LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
      const std::vector<T> got = y.download();
      const std::string what = label<T>("gemm_skinny rerun", shape_text(M, N, K, splits)) +
                               " run " + std::to_string(run);
      if (run == 0) {
        first = got;
        CHECK_MESSAGE(count_written(got, 0) == got.size(), what << ": elements left unwritten");
      } else {
        CHECK_MESSAGE(std::memcmp(got.data(), first.data(), got.size() * sizeof(T)) == 0,
                      what << ": bits differ from run 0");
      }
    }
  });
}

// A host function (no device needed): the rules in gemm_skinny.cuh's comment.
TEST_CASE(
    "plan_gemm_skinny_splits: 1..8, deterministic; the counts measured fastest at 7B and 13B") {
  for (const int M : {1, 16, 17, 64}) {
    for (const int N : {8, 136, 4096, 12288, 32000}) {
      for (const int K : {8, 72, 1032, 4096, 11008}) {
        for (const int sms : {1, 16, 78, 132}) {
          const int s = k::plan_gemm_skinny_splits(M, N, K, sms);
          CHECK_MESSAGE((s >= 1 && s <= k::kSkinnyMaxSplits), shape_text(M, N, K, s)
                                                                  << " sms=" << sms);
          CHECK(s == k::plan_gemm_skinny_splits(M, N, K, sms));  // deterministic
        }
      }
    }
  }
  // At most 1.5 blocks per multiprocessor and 6 splits, each at least 4 stages of 64; the counts
  // measured fastest for the narrow products (gemm_skinny.cuh): 7B o and down 6, 13B's 4; 7B
  // qkv (96 tiles) 2, gate|up (172) 1.
  const int sms = 132, M = 16;
  struct Case {
    int N, K, want;
  };
  for (const Case c : {Case{4096, 4096, 6}, Case{4096, 11008, 6}, Case{5120, 5120, 4},
                       Case{5120, 13824, 4}, Case{12288, 4096, 2}, Case{22016, 4096, 1}}) {
    const int s = k::plan_gemm_skinny_splits(M, c.N, c.K, sms);
    const int64_t tiles = k::ceil_div(c.N, k::kSkinnyBlockN),
                  stages = k::ceil_div(c.K, k::kSkinnyBlockK);
    INFO(shape_text(M, c.N, c.K, s)
         << " sms=132: " << tiles << " column tiles, " << stages << " stages");
    CHECK(s == c.want);
    CHECK((s == 1 || (2 * tiles * s <= 3 * sms && stages >= 4 * s)));
  }
}

TEST_CASE("gemm_skinny: refused operands return cudaErrorInvalidValue, say why, launch nothing") {
  LLAMA2_GPU_TEST_OR_SKIP();
  for_each_16bit_dtype([&](auto tag) {
    using T = decltype(tag);
    const int M = 16, N = 136, K = 72;
    // Room for every refused shape (M 65; a pointer + 1), so a refusal that fails to happen shows
    // as a failed check rather than a memory fault.
    DeviceBuffer<T> x(size_t(k::kSkinnyMaxRows + 1) * K + 8), w(size_t(N) * K + 8);
    DeviceBuffer<T> y(size_t(k::kSkinnyMaxRows + 1) * N + 8);  // [65, N] and a bit
    y.poison();
    (void)llama2::take_launch_error();
    struct Case {
      const char* what;
      const T *x, *w;
      T* y;
      int M, N, K, splits;
      bool fits;
    };
    const Case cases[] = {
        {"M 0", x.get(), w.get(), y.get(), 0, N, K, 1, false},
        {"M 65", x.get(), w.get(), y.get(), k::kSkinnyMaxRows + 1, N, K, 1, false},
        {"N 12", x.get(), w.get(), y.get(), M, 12, K, 1, false},
        {"K 12", x.get(), w.get(), y.get(), M, N, 12, 1, false},
        {"x + 1", x.get() + 1, w.get(), y.get(), M, N, K, 1, false},
        {"w + 1", x.get(), w.get() + 1, y.get(), M, N, K, 1, false},
        {"y + 1", x.get(), w.get(), y.get() + 1, M, N, K, 1, false},
        {"null x", nullptr, w.get(), y.get(), M, N, K, 1, false},
        {"null w", x.get(), nullptr, y.get(), M, N, K, 1, false},
        {"null y", x.get(), w.get(), nullptr, M, N, K, 1, false},
        {"splits 0", x.get(), w.get(), y.get(), M, N, K, 0, true},
        {"splits 9", x.get(), w.get(), y.get(), M, N, K, k::kSkinnyMaxSplits + 1, true},
    };
    for (const Case& c : cases) {
      INFO(dtype_name<T>() << " " << c.what);
      CHECK(k::gemm_skinny_fits(c.x, c.w, c.y, c.M, c.N, c.K) == c.fits);
      const k::GemmSkinnyArgs<T> args{c.x, c.w, c.y, c.M, c.N, c.K};
      CHECK(k::launch_gemm_skinny<T>(args, c.splits, nullptr) == cudaErrorInvalidValue);
      const std::string reason = llama2::take_launch_error();  // LLAMA2_LAUNCH_REQUIRE's record
      INFO("reason: " << reason);
      CHECK(reason.find(" failed") != std::string::npos);
    }
    // A refusal returns before any CUDA call (test_launch_errors.cu): no sticky or pending error,
    // and y keeps its poison.
    LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
    CHECK(cudaGetLastError() == cudaSuccess);
    CHECK_MESSAGE(count_written(y.download(), 0) == 0, dtype_name<T>() << ": a refusal wrote y");
    // An accepted launch afterwards runs and records no reason.
    const k::GemmSkinnyArgs<T> ok{x.get(), w.get(), y.get(), M, N, K};
    LLAMA2_CUDA_REQUIRE(k::launch_gemm_skinny<T>(ok, 1, nullptr));
    CHECK(llama2::take_launch_error().empty());
    LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  });
}
