// Filling the weight shard on the device: converting checkpoint elements (F32/F16/BF16 as stored)
// into the model dtype, and generating deterministic synthetic weights for benchmark shapes that
// have no files (`--synthetic 7b|13b|70b`).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace llama2::kernels {

// The element type of a checkpoint tensor, as WeightStore reports it.
enum class SourceType : int { kF32 = 0, kF16 = 1, kBF16 = 2 };

// dst[i] = round_T(src[i]) for i < n; src holds n elements of `type`. Exact for same-type copies
// and widening; narrowing rounds to nearest even. Launch: grid-stride, 256 threads.
template <typename T>
cudaError_t launch_convert(const void* src, SourceType type, int64_t n,
                           T* dst,  // [n]
                           cudaStream_t stream);

// dst[i] = round_T(mean + scale * u(seed, i)), u uniform in [-1, 1) from a counter-based hash of
// (seed, i): the same values on every GPU and every run, independent of the launch shape.
template <typename T>
cudaError_t launch_fill_uniform(T* dst, int64_t n, uint64_t seed, float mean, float scale,
                                cudaStream_t stream);

}  // namespace llama2::kernels
