// Owning handles for device and pinned host memory, and the cuBLAS GEMM the CUDA runner uses for
// every linear layer.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/check.h"

namespace llama2 {

// cudaMalloc'ed bytes, freed on destruction. Error (naming what and how much) when out of memory.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(size_t bytes, const std::string& what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// cudaMallocHost'ed (page-locked) bytes: the staging area of weight uploads and step metadata.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;

  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// y[M, N] = x[M, K] . w[N, K]^T, row-major, elements of `type` (CUDA_R_16F, CUDA_R_16BF,
// CUDA_R_32F), fp32 accumulation (no TF32 for fp32, so the fp32 mode is a validation mode).
// cuBLAS is column-major: this is C[N, M] = W^T[N, K] . X[K, M] with W seen as [K, N].
void gemm_xwt(cublasHandle_t handle, cudaDataType_t type, const void* x, const void* w, void* y,
              int M, int N, int K);

}  // namespace llama2
