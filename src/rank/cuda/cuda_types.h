// The cuBLAS / communicator element types of the CUDA backend's activation dtypes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include "rank/comm.h"

namespace llama2 {

template <typename T>
struct TypeInfo;
template <>
struct TypeInfo<float> {
  static constexpr cudaDataType_t kCuda = CUDA_R_32F;
  static constexpr CommType kComm = CommType::kF32;
};
template <>
struct TypeInfo<__half> {
  static constexpr cudaDataType_t kCuda = CUDA_R_16F;
  static constexpr CommType kComm = CommType::kF16;
};
template <>
struct TypeInfo<__nv_bfloat16> {
  static constexpr cudaDataType_t kCuda = CUDA_R_16BF;
  static constexpr CommType kComm = CommType::kBF16;
};

}  // namespace llama2
