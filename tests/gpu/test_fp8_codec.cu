// The host e4m3 codec that FP8 checkpoints are written and read with (f32_to_e4m3 in
// tools/safetensors_writer.h, e4m3_to_f32 in rank/safetensors.h) against CUDA's own conversion:
// `llama2 convert-fp8` must write the bytes the GPU's --weight-dtype fp8 makes (kernels/quant.cu).
// Inputs: every e4m3 value, every midpoint between neighbours (the ties), one fp32 ulp either side
// of each, subnormals, zero, values past 448; both signs.
#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/quant.cuh"
#include "rank/tensor_file.h"
#include "tools/safetensors_writer.h"

namespace k = llama2::kernels;
using namespace llama2::gputest;

namespace {

std::vector<float> codec_inputs(bool past_448) {
  std::vector<float> v;
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = llama2::e4m3_to_f32(static_cast<uint8_t>(c));
    const float hi = llama2::e4m3_to_f32(static_cast<uint8_t>(c + 1));
    const float mid = 0.5f * (lo + hi);  // exact: e4m3 midpoints need 5 mantissa bits
    for (float x :
         {lo, mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e9f), std::nextafter(lo, 1e9f)}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  v.push_back(448.f);
  v.push_back(-448.f);
  if (past_448) {
    for (float x : {448.5f, 463.9f, 464.f, 470.f, 480.f, 1e6f, INFINITY}) {
      v.push_back(x);
      v.push_back(-x);
    }
  }
  return v;
}

}  // namespace

TEST_CASE("fp8 codec: the host encoder and decoder equal cuda_fp8.h's (host side, no device)") {
  int mismatches = 0;
  for (float x : codec_inputs(true)) {
    const uint8_t want = __nv_fp8_e4m3(x).__x;
    if (llama2::f32_to_e4m3(x) != want && ++mismatches <= 5) {
      MESSAGE("x = " << x << ": host " << int(llama2::f32_to_e4m3(x)) << ", cuda_fp8.h "
                     << int(want));
    }
  }
  CHECK(mismatches == 0);
  for (int c = 0; c < 256; ++c) {
    __nv_fp8_e4m3 q;
    q.__x = static_cast<__nv_fp8_storage_t>(c);
    const float want = static_cast<float>(q), got = llama2::e4m3_to_f32(static_cast<uint8_t>(c));
    CHECK_MESSAGE((got == want || (std::isnan(got) && std::isnan(want))), "code " << c);
  }
}

TEST_CASE("fp8 codec: the host encoder equals quantize_rows on the device (scale exactly 1)") {
  LLAMA2_GPU_TEST_OR_SKIP();
  // Rows of K: 448 first, so that s = 448 / 448 = 1 and q = e4m3(x) exactly as the kernel rounds.
  const std::vector<float> in = codec_inputs(false);
  const int K = 64;
  const int rows = static_cast<int>((in.size() + K - 2) / (K - 1));
  std::vector<float> x(size_t(rows) * K, 0.f);
  for (int r = 0; r < rows; ++r) {
    x[size_t(r) * K] = 448.f;
    for (int c = 1; c < K && size_t(r) * (K - 1) + c - 1 < in.size(); ++c) {
      x[size_t(r) * K + c] = in[size_t(r) * (K - 1) + c - 1];
    }
  }
  DeviceBuffer<float> dx(x), ds(rows);
  DeviceBuffer<__nv_fp8_e4m3> dq(x.size());
  LLAMA2_CUDA_REQUIRE(
      (k::launch_quantize_rows<__nv_fp8_e4m3, float>(dx.get(), dq.get(), ds.get(), rows, K, 0)));
  LLAMA2_CUDA_REQUIRE(cudaDeviceSynchronize());
  const std::vector<__nv_fp8_e4m3> q = dq.download();
  int mismatches = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (q[i].__x != llama2::f32_to_e4m3(x[i]) && ++mismatches <= 5) {
      MESSAGE("x = " << x[i] << ": device " << int(q[i].__x) << ", host "
                     << int(llama2::f32_to_e4m3(x[i])));
    }
  }
  CHECK(mismatches == 0);
  for (float s : ds.download()) CHECK(s == 1.f);
}
