// The one-shot all-reduce (kernels/allreduce.cuh) and its fused form with the residual add and
// RMSNorm, with R "ranks" that are R streams of one GPU: every rank's exchange buffer is a plain
// allocation of this process, so the kernels' pushes, release/acquire flags, epochs and the two
// alternating slots run as they do between GPUs (where the peers' buffers are CUDA IPC mappings).
// Each rank's kernel spins until every peer's has pushed, so the R launches must run at the same
// time: one block each, on non-blocking streams.
//
//   all-reduce: every rank's result is the fp32 sum in rank order rounded to T, exactly (inputs
//     exactly representable, gpu_test_util.h), over several calls in a row (both slots, epochs).
//   fused: residual and out bit-identical to launch_allreduce + launch_add_rmsnorm on the same
//     inputs, on every rank, with fused and unfused calls interleaved (they share the epochs);
//     and against the CPU reference (residual exact, out within two roundings).
//   fits: the shapes and pointers the fused form refuses (so NcclComm falls back to the unfused
//     path), and the launcher's refusals.
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/allreduce.cuh"
#include "kernels/rmsnorm.cuh"
#include "rank/cpu_ops.h"

namespace k = llama2::kernels;
using namespace llama2::gputest;

namespace {

constexpr size_t kMaxBytes = 16 * 1024;  // NcclComm::kOneShotBytes

// R ranks on one GPU: exchange buffers zeroed (flags and epoch counters start at 0), one
// non-blocking stream per rank.
class StreamRanks {
 public:
  explicit StreamRanks(int ranks) : ranks_(ranks) {
    const size_t bytes = k::allreduce_buffer_bytes(ranks, kMaxBytes);
    for (int r = 0; r < ranks; ++r) {
      LLAMA2_CUDA_REQUIRE(cudaMalloc(&buffers_[r], bytes));
      LLAMA2_CUDA_REQUIRE(cudaMemset(buffers_[r], 0, bytes));
      LLAMA2_CUDA_REQUIRE(cudaStreamCreateWithFlags(&streams_[r], cudaStreamNonBlocking));
    }
    LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  }
  ~StreamRanks() {
    for (int r = 0; r < ranks_; ++r) {
      (void)cudaStreamDestroy(streams_[r]);
      (void)cudaFree(buffers_[r]);
    }
  }
  StreamRanks(const StreamRanks&) = delete;
  StreamRanks& operator=(const StreamRanks&) = delete;

  cudaStream_t stream(int r) const { return streams_[r]; }
  k::AllReduceShared shared(int r) const {
    k::AllReduceShared s;
    s.rank = r;
    s.ranks = ranks_;
    s.max_bytes = kMaxBytes;
    for (int i = 0; i < ranks_; ++i) s.buffers[i] = buffers_[i];
    return s;
  }
  // launch(r) for every rank, then the first error. Never stops between ranks: a rank whose peer
  // was not launched would spin forever, and so would the cudaFree of the cleanup.
  cudaError_t launch_all(const std::function<cudaError_t(int)>& launch) const {
    cudaError_t first = cudaSuccess;
    for (int r = 0; r < ranks_; ++r) {
      const cudaError_t e = launch(r);
      if (first == cudaSuccess) first = e;
    }
    return first;
  }
  // Every stream idle within 20 s, or the process ends with the stage named: a kernel spinning on a
  // peer that never pushes cannot be cleaned up (the test binary would hang until its timeout).
  void sync(const std::string& stage) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (int r = 0; r < ranks_; ++r) {
      cudaError_t e;
      while ((e = cudaStreamQuery(streams_[r])) == cudaErrorNotReady) {
        if (std::chrono::steady_clock::now() > deadline) {
          std::fprintf(stderr, "HANG: %s: rank %d's stream still busy after 20 s\n", stage.c_str(),
                       r);
          std::fflush(stderr);
          std::_Exit(3);
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      LLAMA2_CUDA_REQUIRE(e);
    }
  }

 private:
  int ranks_;
  std::array<void*, k::kAllReduceMaxRanks> buffers_{};
  std::array<cudaStream_t, k::kAllReduceMaxRanks> streams_{};
};

// Launches each kernel a round uses once on one "rank" (no peer to wait for). CUDA loads modules
// lazily by default, and a kernel's first launch may wait for the device to go idle: launched while
// rank 0's all-reduce spins on a peer that is queued after it, that launch never returns (the
// lazy-loading caveat of the CUDA programming guide for kernels that rely on running at the same
// time; call 1 of 2026-12-02 hung in add_rmsnorm's first launch). Between processes, as the engine
// runs, a rank's spinning kernel only waits for its peer's, which goes on regardless.
template <typename T>
void load_kernels() {
  static bool loaded = false;  // once per dtype and process: a module loads once
  if (loaded) return;
  loaded = true;
  const StreamRanks one(1);
  const int64_t n = 64;
  DeviceBuffer<T> a(to_dtype<T>(exact_random(n, 1))), b(to_dtype<T>(exact_random(n, 2))),
      w(to_dtype<T>(exact_random(n, 3))), out(n);
  LLAMA2_CUDA_REQUIRE(k::launch_allreduce<T>(one.shared(0), a.get(), n, one.stream(0)));
  LLAMA2_CUDA_REQUIRE(k::launch_add_rmsnorm<T>(b.get(), a.get(), w.get(), 1, static_cast<int>(n),
                                               1e-5f, out.get(), one.stream(0)));
  LLAMA2_CUDA_REQUIRE(k::launch_allreduce_add_rmsnorm<T>(one.shared(0), a.get(), b.get(), w.get(),
                                                         out.get(), 1, static_cast<int>(n), 1e-5f,
                                                         one.stream(0)));
  one.sync("loading the kernels");
}

// sum[i] = round_T(partials[0][i] + partials[1][i] + ...), in rank order in fp32.
template <typename T>
std::vector<float> rank_sum(const std::vector<std::vector<float>>& partials) {
  std::vector<float> sum(partials[0].size(), 0.f);
  for (const auto& p : partials) {
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += p[i];
  }
  return round_vec<T>(sum);
}

}  // namespace

TEST_CASE("one-shot all-reduce: ranks on streams of one GPU get the rank-order sum") {
  LLAMA2_GPU_TEST_OR_SKIP();
  for (const int R : {2, 3}) {
    for_each_dtype([&](auto tag) {
      using T = decltype(tag);
      load_kernels<T>();
      StreamRanks g(R);
      const int64_t most = static_cast<int64_t>(kMaxBytes / sizeof(T));
      // Five calls in a row: both slots twice and the epochs past them.
      for (const int64_t n : {int64_t{4096}, most, int64_t{64}, int64_t{8}, most}) {
        const std::string what =
            label<T>("allreduce", "R " + std::to_string(R) + " n " + std::to_string(n));
        INFO(what);
        std::vector<std::vector<float>> parts;
        for (int r = 0; r < R; ++r) parts.push_back(exact_random(n, 100 * R + r + n, -2.f, 2.f));
        std::deque<DeviceBuffer<T>> data;  // not movable: a deque grows in place
        for (int r = 0; r < R; ++r) data.emplace_back(to_dtype<T>(parts[r]));
        LLAMA2_CUDA_REQUIRE(g.launch_all([&](int r) {
          return k::launch_allreduce<T>(g.shared(r), data[r].get(), n, g.stream(r));
        }));
        g.sync(what);
        const auto want = rank_sum<T>(parts);
        for (int r = 0; r < R; ++r) {
          expect_close(what + " rank " + std::to_string(r), to_f32(data[r].download()), want,
                       Tol{0, 0});
        }
      }
    });
  }
}

TEST_CASE("one-shot all-reduce + add + RMSNorm: the unfused numbers, bit for bit, on every rank") {
  LLAMA2_GPU_TEST_OR_SKIP();
  const float eps = 1e-5f;
  struct Shape {
    int rows, hidden;
  };
  // Plain launches, then programmatic ones (the engine's default), each rank's kernels queued on
  // its stream before the next rank's are.
  for (const bool pdl : {false, true}) {
    k::set_programmatic_launch(pdl);
    for (const int R : {2, 3}) {
      for_each_dtype([&](auto tag) {
        using T = decltype(tag);
        load_kernels<T>();
        StreamRanks g(R);
        int call = 0;
        // 7B batch 1 and 2, 13B batch 1 (fp16/bf16), a narrow model, a row of 64 vectors; the
        // shapes that do not fit this dtype's 16 KB are skipped (the fits case covers them).
        for (const Shape sh :
             {Shape{1, 4096}, Shape{2, 4096}, Shape{1, 5120}, Shape{3, 256}, Shape{2, 520}}) {
          const size_t n = static_cast<size_t>(sh.rows) * sh.hidden;
          if (n * sizeof(T) > kMaxBytes) continue;
          const std::string what =
              label<T>("allreduce_add_rmsnorm",
                       std::string(pdl ? "PDL " : "") + "R " + std::to_string(R) + " rows " +
                           std::to_string(sh.rows) + " hidden " + std::to_string(sh.hidden));
          INFO(what);
          std::vector<std::vector<float>> parts;
          for (int r = 0; r < R; ++r) parts.push_back(exact_random(n, 7 * R + r + n, -1.f, 1.f));
          // The residual and the norm weight are replicated: the same on every rank.
          const auto res = exact_random(n, 11 + n, -2.f, 2.f);
          const auto w = exact_random(sh.hidden, 13 + sh.hidden, 0.25f, 1.75f);
          const DeviceBuffer<T> dw(to_dtype<T>(w));

          // Unfused: the all-reduce into each rank's partial, then add_rmsnorm on the same stream.
          std::deque<DeviceBuffer<T>> p_a, res_a, out_a, p_b, res_b, out_b;
          for (int r = 0; r < R; ++r) {
            p_a.emplace_back(to_dtype<T>(parts[r]));
            res_a.emplace_back(to_dtype<T>(res));
            out_a.emplace_back(n);
            p_b.emplace_back(to_dtype<T>(parts[r]));
            res_b.emplace_back(to_dtype<T>(res));
            out_b.emplace_back(n);
            out_a.back().poison();
            out_b.back().poison();
          }
          LLAMA2_CUDA_REQUIRE(g.launch_all([&](int r) {
            const cudaError_t e = k::launch_allreduce<T>(g.shared(r), p_a[r].get(),
                                                         static_cast<int64_t>(n), g.stream(r));
            return e != cudaSuccess
                       ? e
                       : k::launch_add_rmsnorm<T>(res_a[r].get(), p_a[r].get(), dw.get(), sh.rows,
                                                  sh.hidden, eps, out_a[r].get(), g.stream(r));
          }));
          g.sync(what + " unfused");
          // Fused, after the unfused call (one epoch later: the other slot).
          LLAMA2_CUDA_REQUIRE(g.launch_all([&](int r) {
            return k::launch_allreduce_add_rmsnorm<T>(g.shared(r), p_b[r].get(), res_b[r].get(),
                                                      dw.get(), out_b[r].get(), sh.rows, sh.hidden,
                                                      eps, g.stream(r));
          }));
          g.sync(what + " fused");
          call += 2;

          // The CPU reference: residual exact, out within two roundings (test_elementwise.cu).
          const auto sum = rank_sum<T>(parts);
          std::vector<float> want_res(n);
          for (size_t i = 0; i < n; ++i) want_res[i] = res[i] + sum[i];
          want_res = round_vec<T>(want_res);
          std::vector<float> want(n);
          llama2::cpu::rmsnorm(want_res.data(), w.data(), sh.rows, sh.hidden, eps, want.data());
          for (int r = 0; r < R; ++r) {
            const std::string at = what + " rank " + std::to_string(r);
            const auto fused_res = to_f32(res_b[r].download());
            const auto fused_out = to_f32(out_b[r].download());
            expect_close(at + " residual = unfused", fused_res, to_f32(res_a[r].download()),
                         Tol{0, 0});
            expect_close(at + " out = unfused", fused_out, to_f32(out_a[r].download()), Tol{0, 0});
            expect_close(at + " residual", fused_res, want_res, Tol{0, 0});
            expect_close(at + " out", fused_out, want, Tol{rel_tol<T>(2), rel_tol<T>(2) * 1e-3});
            CHECK(to_f32(p_b[r].download()) == round_vec<T>(parts[r]));  // partial left alone
          }
        }
        CHECK(call >= 6);  // at least three shapes ran for every dtype
      });
    }
  }
  k::set_programmatic_launch(true);
}

TEST_CASE("one-shot all-reduce + add + RMSNorm: what the fused form refuses") {
  LLAMA2_GPU_TEST_OR_SKIP();
  StreamRanks g(2);
  const auto s = g.shared(0);
  DeviceBuffer<__half> a(8192), b(8192), c(8192), w(8192);
  const char* base = reinterpret_cast<const char*>(a.get());
  const size_t h = sizeof(__half);
  CHECK(k::allreduce_add_rmsnorm_fits(s, a.get(), b.get(), w.get(), c.get(), 2, 4096, h));
  CHECK(!k::allreduce_add_rmsnorm_fits(s, a.get(), b.get(), w.get(), c.get(), 3, 4096, h));
  CHECK(!k::allreduce_add_rmsnorm_fits(s, a.get(), b.get(), w.get(), c.get(), 0, 4096, h));
  CHECK(!k::allreduce_add_rmsnorm_fits(s, a.get(), b.get(), w.get(), c.get(), 2, 4100, h));
  CHECK(!k::allreduce_add_rmsnorm_fits(s, base + 2, b.get(), w.get(), c.get(), 1, 4096, h));
  CHECK(!k::allreduce_add_rmsnorm_fits(s, a.get(), b.get() + 1, w.get(), c.get(), 1, 4096, h));
  CHECK(!k::allreduce_add_rmsnorm_fits(s, a.get(), b.get(), w.get() + 4, c.get(), 1, 4096, h));
  CHECK(!k::allreduce_add_rmsnorm_fits(s, a.get(), b.get(), w.get(), c.get() + 2, 1, 4096, h));
  CHECK(!k::allreduce_add_rmsnorm_fits(s, a.get(), b.get(), w.get(), c.get(), 1, 4096, 3));
  // The launcher refuses what fits() refuses and out aliasing the residual, before any launch
  // (so the peer is never left waiting).
  CHECK(k::launch_allreduce_add_rmsnorm<__half>(s, a.get(), b.get(), w.get(), c.get(), 3, 4096,
                                                1e-5f, g.stream(0)) == cudaErrorInvalidValue);
  CHECK(k::launch_allreduce_add_rmsnorm<__half>(s, a.get(), b.get(), w.get(), b.get(), 1, 4096,
                                                1e-5f, g.stream(0)) == cudaErrorInvalidValue);
  CHECK(k::launch_allreduce_add_rmsnorm<__half>(s, a.get(), b.get(), w.get(), c.get(), 1, 4096,
                                                -1.f, g.stream(0)) == cudaErrorInvalidValue);
  k::AllReduceShared missing = s;
  missing.buffers[1] = nullptr;
  CHECK(k::launch_allreduce_add_rmsnorm<__half>(missing, a.get(), b.get(), w.get(), c.get(), 1,
                                                4096, 1e-5f, g.stream(0)) == cudaErrorInvalidValue);
  g.sync("refusals");
}
