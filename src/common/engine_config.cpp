#include "common/engine_config.h"

#include "common/check.h"

namespace llama2 {

const char* to_string(Backend b) {
  switch (b) {
    case Backend::kAuto:
      return "auto";
    case Backend::kCpu:
      return "cpu";
    case Backend::kCuda:
      return "cuda";
  }
  return "?";
}

const char* to_string(ComputeDType d) {
  switch (d) {
    case ComputeDType::kAuto:
      return "auto";
    case ComputeDType::kFp16:
      return "fp16";
    case ComputeDType::kBf16:
      return "bf16";
    case ComputeDType::kFp32:
      return "fp32";
  }
  return "?";
}

const char* kv_dtype_name(KvCacheDType kv, ComputeDType dtype) {
  return kv == KvCacheDType::kFp8E4m3 ? "fp8_e4m3" : to_string(dtype);
}

const char* weight_dtype_name(WeightDType w, ComputeDType dtype) {
  switch (w) {
    case WeightDType::kFp8:
      return "fp8_e4m3";
    case WeightDType::kInt8:
      return "int8";
    case WeightDType::kInt4:
      return "int4";
    case WeightDType::kAuto:
      break;
  }
  return to_string(dtype);
}

int weight_dtype_bytes(WeightDType w, ComputeDType dtype) {
  if (w == WeightDType::kInt4) return kInt4LinearBytes;
  if (w != WeightDType::kAuto) return 1;
  return dtype == ComputeDType::kFp32 ? 4 : 2;
}

Backend parse_backend(const std::string& s) {
  if (s == "auto") return Backend::kAuto;
  if (s == "cpu") return Backend::kCpu;
  if (s == "cuda") return Backend::kCuda;
  throw Error("--backend must be one of cpu, cuda, auto (got \"" + s + "\")");
}

ComputeDType parse_compute_dtype(const std::string& s) {
  for (ComputeDType d :
       {ComputeDType::kAuto, ComputeDType::kFp16, ComputeDType::kBf16, ComputeDType::kFp32}) {
    if (s == to_string(d)) return d;
  }
  throw Error("--dtype must be one of auto, fp16, bf16, fp32 (got \"" + s + "\")");
}

KvCacheDType parse_kv_cache_dtype(const std::string& s) {
  if (s == "auto") return KvCacheDType::kAuto;
  if (s == "fp8" || s == "fp8_e4m3") return KvCacheDType::kFp8E4m3;
  throw Error("--kv-cache-dtype must be one of auto, fp8, fp8_e4m3 (got \"" + s + "\")");
}

bool parse_prefix_caching(const std::string& s) {
  if (s == "on") return true;
  if (s == "off") return false;
  throw Error("--prefix-caching must be one of on, off (got \"" + s + "\")");
}

WeightDType parse_weight_dtype(const std::string& s, ComputeDType* requested) {
  *requested = ComputeDType::kAuto;
  if (s == "auto") return WeightDType::kAuto;
  if (s == "fp16" || s == "bf16") {
    *requested = parse_compute_dtype(s);
    return WeightDType::kAuto;
  }
  if (s == "fp8" || s == "fp8_e4m3") return WeightDType::kFp8;
  if (s == "int8") return WeightDType::kInt8;
  if (s == "int4") return WeightDType::kInt4;
  throw Error("--weight-dtype must be one of auto, fp16, bf16, fp8, fp8_e4m3, int8, int4 (got \"" +
              s + "\")");
}

}  // namespace llama2
