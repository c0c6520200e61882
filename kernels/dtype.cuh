// Element types of activations and of the KV cache, and the fp32 load/store helpers every kernel
// family uses. fp16 (`__half`) and bf16 (`__nv_bfloat16`) are the model dtypes; fp32 (`float`) is
// instantiated too so that each kernel can be validated against the fp32 CPU reference at ~1e-5.
// Arithmetic is always fp32: load -> to_float -> compute -> from_float -> store.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
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

// p must be aligned to sizeof(T) * N.
template <typename T, int N>
__device__ __forceinline__ void load_float(const T* p, float (&out)[N]) {
  const Pack<T, N> pk = *reinterpret_cast<const Pack<T, N>*>(p);
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = to_float(pk.v[i]);
}

template <typename T, int N>
__device__ __forceinline__ void store_float(T* p, const float (&in)[N]) {
  Pack<T, N> pk;
#pragma unroll
  for (int i = 0; i < N; ++i) pk.v[i] = from_float<T>(in[i]);
  *reinterpret_cast<Pack<T, N>*>(p) = pk;
}

inline bool is_aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

__host__ __device__ constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// ---- Programmatic dependent launch (PDL, sm_90): every kernel is launched with programmatic
// stream serialization, so the GPU may schedule a kernel's blocks while the previous kernel's last
// blocks finish, and every kernel's first statement waits for the previous grid to complete and
// its memory to be visible. Only the launch latency overlaps (nothing is read or written before
// the wait), which is what a decode step of ~300 short kernels is made of. Off: plain launches.
inline bool g_programmatic_launch = true;
inline void set_programmatic_launch(bool on) {
  g_programmatic_launch = on;
}

__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute when enabled.
template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attr;
  config.numAttrs = g_programmatic_launch ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
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

}  // namespace llama2::kernels
