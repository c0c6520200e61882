#include <utility>

#include "rank/cuda/device_buffer.h"

namespace llama2 {

DeviceBuffer::DeviceBuffer(size_t bytes, const std::string& what) : bytes_(bytes) {
  if (bytes == 0) return;
  const cudaError_t rc = cudaMalloc(&ptr_, bytes);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    throw Error("out of GPU memory allocating " + what + " (" + std::to_string(bytes >> 20) +
                " MiB; " + std::to_string(free_b >> 20) + " MiB free of " +
                std::to_string(total_b >> 20) + " MiB): " + cudaGetErrorString(rc) +
                ". Use more GPUs (tensor parallelism), a smaller --gpu-memory-fraction for other "
                "tenants, or see `llama2 plan`");
  }
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ != nullptr) (void)cudaFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) (void)cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes > 0) CUDA_CHECK(cudaMallocHost(&ptr_, bytes));
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_ != nullptr) (void)cudaFreeHost(ptr_);
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_ != nullptr) (void)cudaFreeHost(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void gemm_xwt(cublasHandle_t handle, cudaDataType_t type, const void* x, const void* w, void* y,
              int M, int N, int K) {
  if (M == 0) return;
  const float alpha = 1.f, beta = 0.f;
  CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, &alpha, w, type, K, x, type,
                            K, &beta, y, type, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace llama2
