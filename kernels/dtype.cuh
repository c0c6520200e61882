// Element types of activations and of the KV cache, and the fp32 load/store helpers every kernel
// family uses. fp16 (`__half`) and bf16 (`__nv_bfloat16`) are the model dtypes; fp32 (`float`) is
// instantiated too so that each kernel can be validated against the fp32 CPU reference at ~1e-5.
// fp8 e4m3 (`__nv_fp8_e4m3`) is a storage type for fp16/bf16 models: of the KV cache (half the
// bytes per cached token) and of quantized weights and activations (--weight-dtype fp8); int8 of
// quantized weights (--weight-dtype int8). Both are converted to fp32 on load like the others.
// Arithmetic is always fp32: load -> to_float -> compute -> from_float -> store.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

namespace llama2::kernels {

__host__ __device__ __forceinline__ float to_float(float x) {
  return x;
}
__host__ __device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
__host__ __device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}
__host__ __device__ __forceinline__ float to_float(__nv_fp8_e4m3 x) {
  return static_cast<float>(x);
}
// int8 is a weight-only storage type (--weight-dtype int8): the stored integer, before its scale.
__host__ __device__ __forceinline__ float to_float(int8_t x) {
  return static_cast<float>(x);
}

// Round-to-nearest-even conversion from fp32.
template <typename T>
__host__ __device__ __forceinline__ T from_float(float x);
template <>
__host__ __device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__host__ __device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__host__ __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
// Round to nearest even, saturating at +-448 (e4m3's largest finite value) rather than producing
// NaN: a K/V value beyond the format's range is clipped, never poisons a whole softmax.
template <>
__host__ __device__ __forceinline__ __nv_fp8_e4m3 from_float<__nv_fp8_e4m3>(float x) {
  return __nv_fp8_e4m3(x);
}

// x rounded to T and back: what a value becomes when it is stored as T (HF rounds there too).
template <typename T>
__host__ __device__ __forceinline__ float round_to(float x) {
  return to_float(from_float<T>(x));
}

// Elements of T in one 16-byte access, the unit of vectorised global memory traffic.
template <typename T>
inline constexpr int kVec16 = static_cast<int>(16 / sizeof(T));

// N consecutive elements, aligned to their size so that a copy compiles to one wide access.
template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};
// fp8 packs are held as 32-bit words (4 elements each, the first in the low byte): as an array of
// bytes, the compiler loaded them as 16-bit pieces and spent ~6 integer instructions per element
// reassembling words for the conversion.
template <int N>
struct alignas(N) Pack<__nv_fp8_e4m3, N> {
  static_assert(N % 4 == 0, "fp8 packs are whole 32-bit words");
  uint32_t w[N / 4];
};

template <typename T, int N>
__device__ __forceinline__ void store_float(T* p, const float (&in)[N]) {
  constexpr int kPiece = N < kVec16<T> ? N : kVec16<T>;
  static_assert(N % kPiece == 0, "whole pieces");
#pragma unroll
  for (int c = 0; c < N / kPiece; ++c) {
    Pack<T, kPiece> pk;
    if constexpr (std::is_same_v<T, __nv_fp8_e4m3>) {
      // Pairs through the e4m3x2 conversion (round to nearest even, saturating at +-448).
#pragma unroll
      for (int i = 0; i < kPiece; i += 4) {
        const float* x = in + c * kPiece + i;
        const uint32_t lo =
            __nv_cvt_float2_to_fp8x2(make_float2(x[0], x[1]), __NV_SATFINITE, __NV_E4M3);
        const uint32_t hi =
            __nv_cvt_float2_to_fp8x2(make_float2(x[2], x[3]), __NV_SATFINITE, __NV_E4M3);
        pk.w[i / 4] = lo | (hi << 16);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kPiece; ++i) pk.v[i] = from_float<T>(in[c * kPiece + i]);
    }
    *reinterpret_cast<Pack<T, kPiece>*>(p + c * kPiece) = pk;
  }
}

// A loaded pack as fp32. fp8 goes four elements (one 32-bit word) at a time: its two 16-bit
// halves through the hardware e4m3x2 -> f16x2 conversion (sm_89+; exact, every e4m3 value is an
// fp16 value), then f16 -> f32. Element-wise extraction of the bytes cost ~6 integer instructions
// per element and made the fp8 decode kernels ALU-bound at ~27% of HBM bandwidth.
template <typename T, int N>
__device__ __forceinline__ void unpack_float(const Pack<T, N>& pk, float (&out)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_float(pk.v[i]);
}
template <int N>
__device__ __forceinline__ void unpack_float(const Pack<__nv_fp8_e4m3, N>& pk, float (&out)[N]) {
  static_assert(N % 4 == 0, "whole 32-bit words");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 890
#pragma unroll
  for (int i = 0; i < N; ++i) {  // no e4m3x2 conversion before sm_89
    __nv_fp8_e4m3 e;
    e.__x = static_cast<__nv_fp8_storage_t>(pk.w[i / 4] >> (8 * (i % 4)));
    out[i] = to_float(e);
  }
#else
  const uint32_t* w = pk.w;
#pragma unroll
  for (int i = 0; i < N / 4; ++i) {
    uint32_t lo, hi;  // f16x2 of elements (4i, 4i+1) and (4i+2, 4i+3), first element low
    asm("{\n .reg .b16 a, b;\n mov.b32 {a, b}, %2;\n cvt.rn.f16x2.e4m3x2 %0, a;\n"
        " cvt.rn.f16x2.e4m3x2 %1, b;\n}"
        : "=r"(lo), "=r"(hi)
        : "r"(w[i]));
    __half2 h01, h23;
    memcpy(&h01, &lo, 4);
    memcpy(&h23, &hi, 4);
    const float2 f01 = __half22float2(h01), f23 = __half22float2(h23);
    out[4 * i] = f01.x;
    out[4 * i + 1] = f01.y;
    out[4 * i + 2] = f23.x;
    out[4 * i + 3] = f23.y;
  }
#endif
}

// N consecutive elements of T at p as fp32, in accesses of at most 16 bytes (p aligned to the
// smaller of 16 and sizeof(T) * N).
template <typename T, int N>
__device__ __forceinline__ void load_float(const T* p, float (&out)[N]) {
  constexpr int kPiece = N < kVec16<T> ? N : kVec16<T>;
  static_assert(N % kPiece == 0, "whole pieces");
#pragma unroll
  for (int c = 0; c < N / kPiece; ++c) {
    const Pack<T, kPiece> pk = *reinterpret_cast<const Pack<T, kPiece>*>(p + c * kPiece);
    float piece[kPiece];
    unpack_float(pk, piece);
#pragma unroll
    for (int i = 0; i < kPiece; ++i) out[c * kPiece + i] = piece[i];
  }
}

// The (activation T, KV-cache element C) pairs every kernel that touches the cache is instantiated
// for: X(T, C) for each.
#define LLAMA2_FOR_EACH_KV_TYPES(X) \
  X(float, float)                   \
  X(__half, __half)                 \
  X(__nv_bfloat16, __nv_bfloat16)   \
  X(__half, __nv_fp8_e4m3)          \
  X(__nv_bfloat16, __nv_fp8_e4m3)

inline bool is_aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// ---- Programmatic dependent launch (PDL, sm_90): every kernel is launched with programmatic
// stream serialization, so the GPU may schedule a kernel's blocks while the previous kernel's last
// blocks finish, and every kernel's first statement waits for the previous grid to complete and
// its memory to be visible (griddepcontrol.wait). Only the launch latency overlaps (nothing but
// immutable weights is read before the wait), which is what a decode step of ~300 short kernels
// is made of. Off: plain launches. The switch lives in launch.cu (on by default); only the CUDA
// runner sets it, once, from TuningKnobs::pdl (LLAMA2_PDL) before its first launch.
// CMake option LLAMA2_PDL_TRIGGER=ON (default OFF) also lets each kernel's dependents launch as
// it starts (griddepcontrol.launch_dependents before the wait; each wait still covers the whole
// chain before it, so every read and write keeps its order). Measured on one H200 (2026-12-02,
// 7B batch 1, benchmarks/RESULTS.md): fp16 250.7 vs 254.7 tok/s, fp8 377.6 vs 403.6 without it;
// batch 64 the same within noise. Kept for the A/B.
void set_programmatic_launch(bool on);
bool programmatic_launch();
// Bytes of weights a GEMV launch asks L2 for before its wait (gemv_common.cuh: prefetch_rows);
// 0: none. Set once by the CUDA runner from TuningKnobs::gemv_prefetch_kb
// (LLAMA2_GEMV_PREFETCH_KB).
void set_gemv_prefetch_budget(int64_t bytes);
int64_t gemv_prefetch_budget();

#ifndef LLAMA2_PDL_TRIGGER
#define LLAMA2_PDL_TRIGGER 0
#endif

__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#if LLAMA2_PDL_TRIGGER
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Asks L2 to fetch `bytes` (a multiple of 16) from 16-byte aligned global memory, asynchronously
// (sm_90 bulk prefetch; nothing on older GPUs). A hint: nothing waits for it.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (bytes >= 16) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes));
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...) in thread-block clusters of cluster_x blocks
// along x (sm_90; 0: no cluster attribute), with the PDL attribute when enabled.
template <typename... Params, typename... Args>
cudaError_t launch_kernel_in_clusters(unsigned cluster_x, void (*kernel)(Params...), dim3 grid,
                                      dim3 block, size_t smem, cudaStream_t stream,
                                      Args&&... args) {
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (cluster_x > 0) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = cluster_x;
    attr[n].val.clusterDim.y = 1;
    attr[n].val.clusterDim.z = 1;
    ++n;
  }
  if (programmatic_launch()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = n;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute when enabled.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args&&... args) {
  return launch_kernel_in_clusters(0, kernel, grid, block, smem, stream,
                                   std::forward<Args>(args)...);
}

template <typename T>
const char* dtype_name();
template <>
inline const char* dtype_name<float>() {
  return "fp32";
}
template <>
inline const char* dtype_name<__half>() {
  return "fp16";
}
template <>
inline const char* dtype_name<__nv_bfloat16>() {
  return "bf16";
}
template <>
inline const char* dtype_name<__nv_fp8_e4m3>() {
  return "fp8_e4m3";
}

}  // namespace llama2::kernels
