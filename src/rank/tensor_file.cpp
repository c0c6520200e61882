#include "rank/tensor_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/check.h"

// Tensor data is read by memcpy'ing elements straight into host integers/floats.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoint data is little-endian");

namespace llama2 {

// ---- dtypes and conversions ----

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return 4;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
    case DType::F8_E4M3:
      return 1;
    case DType::I32:
      return 4;
    case DType::Other:
      return 0;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "F32";
    case DType::F16:
      return "F16";
    case DType::BF16:
      return "BF16";
    case DType::F8_E4M3:
      return "F8_E4M3";
    case DType::I32:
      return "I32";
    case DType::Other:
      return "other";
  }
  return "other";
}

DType dtype_from_name(const std::string& name) {
  if (name == "F32") return DType::F32;
  if (name == "F16") return DType::F16;
  if (name == "BF16") return DType::BF16;
  if (name == "F8_E4M3") return DType::F8_E4M3;
  if (name == "I32") return DType::I32;
  return DType::Other;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    // Inf stays inf; a NaN keeps its payload (shifted into the top of the fp32 mantissa).
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {
    // Subnormal: value = mant * 2^-24. Shift the leading 1 up to the implicit-bit position
    // (bit 10), lowering the exponent once per shift; every fp16 subnormal is an fp32 normal.
    int32_t e = 127 - 15 + 1;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    bits = sign | (static_cast<uint32_t>(e) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16_to_f32(uint16_t b) {
  // bf16 is the top half of an fp32, so the widening is exact for every value, NaN included.
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float e4m3_to_f32(uint8_t b) {
  const float sign = (b & 0x80u) ? -1.f : 1.f;
  const int exp = (b >> 3) & 0xf;
  const int mant = b & 0x7;
  if (exp == 0xf && mant == 0x7) return std::numeric_limits<float>::quiet_NaN();
  // Subnormals: mant * 2^-9; normals: (8 + mant) * 2^(exp - 10). Both products are exact.
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);
  return sign * std::ldexp(static_cast<float>(8 + mant), exp - 10);
}

void convert_to_f32(DType dtype, const uint8_t* src, size_t n, float* out) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(out, src, n * sizeof(float));
      return;
    case DType::F16:
    case DType::BF16: {
      const bool is_f16 = dtype == DType::F16;
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        out[i] = is_f16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
      return;
    }
    case DType::F8_E4M3:
      for (size_t i = 0; i < n; ++i) out[i] = e4m3_to_f32(src[i]);
      return;
    case DType::I32:  // packed integers: only read raw (rank/int4_checkpoint.h)
    case DType::Other:
      break;
  }
  LLAMA2_CHECK(false && "convert_to_f32 called on an unsupported dtype");
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

bool byte_count(const std::vector<int64_t>& shape, size_t elem_size, uint64_t* out) {
  uint64_t n = elem_size;
  for (int64_t d : shape) {
    if (d < 0) return false;
    const uint64_t ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > std::numeric_limits<uint64_t>::max() / ud) return false;
    n *= ud;
  }
  *out = n;
  return true;
}

// ---- TensorFile ----

TensorFile::TensorFile(const std::string& path, const char* kind, uint64_t min_size) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open " + kind + ": " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(path + ": cannot stat " + kind + ": " + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < min_size) {
    ::close(fd);
    throw Error(path + ": file has " + std::to_string(size) + " bytes, shorter than the " +
                std::to_string(min_size) + " bytes of the smallest " + kind + " (truncated?)");
  }
  map_size_ = static_cast<size_t>(size);
  map_ = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw Error(path + ": mmap failed: " + std::strerror(map_err));
  }
}

// A subclass constructor that throws still runs this (the base is fully built), so a file with a
// bad header is unmapped here.
TensorFile::~TensorFile() {
  if (map_) ::munmap(map_, map_size_);
}

const TensorInfo* TensorFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> TensorFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

}  // namespace llama2
