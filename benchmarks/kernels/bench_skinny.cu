// `llama2_bench_kernels skinny`: the skinny tensor-core GEMM (kernels/gemm_skinny.cu, fp16 W,
// M <= 64) against cuBLAS fp16 (llama2::gemm_xwt, what CudaLinear runs) at Llama-2-7B and 13B TP1
// projection shapes and the row counts of decode batches: with the planned K splits and with each
// forced split count 1, 2, 3, 4, 6, 8; then a 7B layer's four projections back to back (qkv,
// o_proj, gate|up, down, each its own W and y), where the skinny kernel's programmatic dependent
// launch lets it request W before its predecessor ends (also shown with PDL off, and next to
// "(singles)": the sum of the four projections timed alone in the first table).
//
// Build: ninja -C build-gpu llama2_bench_kernels     Run: build-gpu/llama2_bench_kernels skinny
//
// Timing: bench_timing.h's time_us (CUDA events around 20 launches after 5 warm-ups, median of 5
// batches; a chain counts as one launch, so its figure is per layer). Each launch takes the next
// of several copies of W (at least 2, together >= 256 MB; the chain: two copies of the 405 MB
// layer), so W comes from HBM as in a forward pass rather than from the 50 MB L2. Launches go to a
// created (blocking) stream, as the engine's do, which the events on the legacy stream bracket.
// TFLOP/s = 2 M N K / time; W GB/s = N K 2 bytes / time (x and y are < 4% of it at M 64), against
// the HBM copy roofline of 4315 GB/s. Before timing, every split count's result is checked against
// cuBLAS (max |diff| < 2e-3 of the largest |y|, a failure otherwise).
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <map>
#include <vector>

#include "bench_timing.h"
#include "common/check.h"
#include "kernels/dtype.cuh"
#include "kernels/gemm_skinny.cuh"
#include "rank/cuda/device_buffer.h"

namespace k = llama2::kernels;
using llama2::DeviceBuffer;
using llama2::bench::time_us;

namespace {

using T = __half;
constexpr size_t kPoolBytes = size_t{1} << 30;  // 3 copies of 13B's gate|up (283 MB)
constexpr size_t kMinCycleBytes = size_t{256} << 20;

struct Shape {
  const char* model;
  const char* name;
  int N, K;
};

// Uniform [lo, hi) from a hash of the index: fills the 1 GB pool in a few milliseconds.
__global__ void fill_uniform(T* p, size_t n, uint32_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    uint64_t z = i + (uint64_t{seed} << 40) + 0x9e3779b97f4a7c15ull;  // splitmix64
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    p[i] = __float2half(lo + (hi - lo) * static_cast<float>(z >> 40) * 0x1p-24f);
  }
}

void fill(const DeviceBuffer& buf, uint32_t seed, float lo, float hi) {
  fill_uniform<<<1024, 256>>>(buf.as<T>(), buf.bytes() / sizeof(T), seed, lo, hi);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace

// Returns the number of failed correctness checks.
int bench_skinny() {
  const Shape shapes[] = {{"7B", "qkv", 12288, 4096},      {"7B", "o_proj", 4096, 4096},
                          {"7B", "gate|up", 22016, 4096},  {"7B", "down", 4096, 11008},
                          {"13B", "qkv", 15360, 5120},     {"13B", "o_proj", 5120, 5120},
                          {"13B", "gate|up", 27648, 5120}, {"13B", "down", 5120, 13824}};
  const int rows[] = {1, 8, 16, 32, 64};
  const int forced[] = {1, 2, 3, 4, 6, 8};
  const int max_m = k::kSkinnyMaxRows, max_n = 27648, max_k = 13824;
  int sms = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CUDA_CHECK(k::prepare_gemm_skinny());

  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  cublasHandle_t blas;
  CUBLAS_CHECK(cublasCreate(&blas));
  CUBLAS_CHECK(cublasSetStream(blas, stream));
  DeviceBuffer cublas_ws(size_t{32} << 20, "cuBLAS workspace");
  CUBLAS_CHECK(cublasSetWorkspace(blas, cublas_ws.as<void>(), cublas_ws.bytes()));
  DeviceBuffer x(sizeof(T) * max_m * max_k, "x"), y(sizeof(T) * max_m * max_n, "y"),
      y_ref(sizeof(T) * max_m * max_n, "y_ref"), pool(kPoolBytes, "fp16 weights");
  fill(x, 1, -1.f, 1.f);
  fill(pool, 2, -0.05f, 0.05f);
  CUDA_CHECK(cudaDeviceSynchronize());
  int failures = 0;
  // The 7B projections' times alone (planned splits), by projection and M, for the chain.
  std::map<int, double> single_blas[4], single_skinny[4];

  auto skinny = [&](const T* xp, const T* w, T* yp, int M, int N, int K, int splits) {
    const k::GemmSkinnyArgs<T> a{xp, w, yp, M, N, K};
    CUDA_CHECK(k::launch_gemm_skinny<T>(a, splits, stream));
  };
  auto cublas = [&](const T* xp, const T* w, T* yp, int M, int N, int K) {
    llama2::gemm_xwt(blas, CUDA_R_16F, xp, w, yp, M, N, K);
  };

  std::printf(
      "\nskinny GEMM (fp16) vs cuBLAS fp16, W from HBM; %d SMs; speedup = cuBLAS us / skinny us\n"
      "%-4s %-8s %3s %6s %6s | %8s %7s %6s | %8s %7s %6s %3s | %7s | %s\n",
      sms, "", "shape", "M", "N", "K", "cuBLAS", "TFLOP/s", "W GB/s", "skinny", "TFLOP/s", "W GB/s",
      "spl", "speedup", "forced splits 1/2/3/4/6/8 us");
  for (const Shape& s : shapes) {
    const size_t w_elems = size_t(s.N) * s.K, w_bytes = w_elems * sizeof(T);
    const size_t want = std::max<size_t>(2, (kMinCycleBytes + w_bytes - 1) / w_bytes);
    const int copies = static_cast<int>(std::min(want, kPoolBytes / w_bytes));
    auto w_at = [&](int i) { return pool.as<T>() + (i % copies) * w_elems; };
    for (const int M : rows) {
      const int planned = k::plan_gemm_skinny_splits(M, s.N, s.K, sms);
      // Correctness first: every split count timed against cuBLAS on the same operands.
      std::vector<int> checked(std::begin(forced), std::end(forced));
      if (std::find(checked.begin(), checked.end(), planned) == checked.end()) {
        checked.push_back(planned);
      }
      cublas(x.as<T>(), w_at(0), y_ref.as<T>(), M, s.N, s.K);
      for (const int splits : checked) {
        CUDA_CHECK(cudaMemsetAsync(y.as<void>(), 0xff, sizeof(T) * M * s.N, stream));
        skinny(x.as<T>(), w_at(0), y.as<T>(), M, s.N, s.K, splits);
        CUDA_CHECK(cudaStreamSynchronize(stream));
        const double err =
            llama2::bench::rel_diff_fp16(y.as<void>(), y_ref.as<void>(), size_t(M) * s.N);
        if (!(err < 2e-3)) {
          std::printf("  CHECK FAILED %s %s M=%d splits=%d: max |skinny - cuBLAS| = %.3g of max\n",
                      s.model, s.name, M, splits, err);
          ++failures;
        }
      }
      const double flop = 2.0 * M * s.N * s.K;
      const double blas_us =
          time_us([&](int i) { cublas(x.as<T>(), w_at(i), y.as<T>(), M, s.N, s.K); });
      const double skinny_us =
          time_us([&](int i) { skinny(x.as<T>(), w_at(i), y.as<T>(), M, s.N, s.K, planned); });
      const int index = static_cast<int>(&s - shapes);
      if (index < 4) {  // a 7B projection: the chain below compares with the sum
        single_blas[index][M] = blas_us;
        single_skinny[index][M] = skinny_us;
      }
      std::printf("%-4s %-8s %3d %6d %6d | %8.1f %7.1f %6.0f | %8.1f %7.1f %6.0f %3d | %7.2f |",
                  s.model, s.name, M, s.N, s.K, blas_us, flop / blas_us * 1e-6,
                  w_bytes / blas_us * 1e-3, skinny_us, flop / skinny_us * 1e-6,
                  w_bytes / skinny_us * 1e-3, planned, blas_us / skinny_us);
      for (const int splits : forced) {
        std::printf(" %.1f", time_us([&](int i) {
                      skinny(x.as<T>(), w_at(i), y.as<T>(), M, s.N, s.K, splits);
                    }));
      }
      std::printf("\n");
    }
  }

  // A 7B layer's projections back to back, as a forward pass issues them (attention and the
  // norms between them left out): the skinny kernel's W prefetch before griddepcontrol.wait can
  // only overlap a predecessor here. Two copies of the layer's 405 MB of W alternate.
  {
    const Shape* layer = shapes;  // the four 7B projections
    size_t offset[2][4], layer_elems = 0;
    for (int p = 0; p < 4; ++p) layer_elems += size_t(layer[p].N) * layer[p].K;
    for (int c = 0; c < 2; ++c) {
      size_t at = c * layer_elems;
      for (int p = 0; p < 4; ++p) {
        offset[c][p] = at;
        at += size_t(layer[p].N) * layer[p].K;
      }
    }
    LLAMA2_CHECK(2 * layer_elems * sizeof(T) <= kPoolBytes);
    DeviceBuffer outs[4] = {
        DeviceBuffer(sizeof(T) * max_m * layer[0].N, "y qkv"),
        DeviceBuffer(sizeof(T) * max_m * layer[1].N, "y o_proj"),
        DeviceBuffer(sizeof(T) * max_m * layer[2].N, "y gate|up"),
        DeviceBuffer(sizeof(T) * max_m * layer[3].N, "y down"),
    };
    auto chain = [&](int M, int i, bool use_skinny, const int* splits) {
      for (int p = 0; p < 4; ++p) {
        const T* w = pool.as<T>() + offset[i % 2][p];
        if (use_skinny) {
          skinny(x.as<T>(), w, outs[p].as<T>(), M, layer[p].N, layer[p].K, splits[p]);
        } else {
          cublas(x.as<T>(), w, outs[p].as<T>(), M, layer[p].N, layer[p].K);
        }
      }
    };
    std::printf(
        "\n7B layer chain: qkv, o_proj, gate|up, down back to back, us per layer (W %.0f MB)\n"
        "%5s | %9s %9s | %9s %9s %9s | %7s\n",
        layer_elems * sizeof(T) / 1e6, "M", "cuBLAS", "(singles)", "skinny", "no PDL", "(singles)",
        "speedup");
    const bool pdl = k::programmatic_launch();
    for (const int M : {16, 32, 64}) {
      int splits[4];
      for (int p = 0; p < 4; ++p) {
        splits[p] = k::plan_gemm_skinny_splits(M, layer[p].N, layer[p].K, sms);
      }
      const double blas_us = time_us([&](int i) { chain(M, i, false, splits); });
      k::set_programmatic_launch(true);
      const double skinny_us = time_us([&](int i) { chain(M, i, true, splits); });
      k::set_programmatic_launch(false);
      const double plain_us = time_us([&](int i) { chain(M, i, true, splits); });
      k::set_programmatic_launch(pdl);
      double blas_sum = 0, skinny_sum = 0;
      for (int p = 0; p < 4; ++p) {
        blas_sum += single_blas[p][M];
        skinny_sum += single_skinny[p][M];
      }
      std::printf("%5d | %9.1f %9.1f | %9.1f %9.1f %9.1f | %7.2f\n", M, blas_us, blas_sum,
                  skinny_us, plain_us, skinny_sum, blas_us / skinny_us);
    }
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));
  cublasDestroy(blas);
  CUDA_CHECK(cudaStreamDestroy(stream));
  return failures;
}
