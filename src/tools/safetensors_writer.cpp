#include "tools/safetensors_writer.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/check.h"

// Elements are written by memcpy'ing host integers/floats; safetensors is little-endian.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

namespace llama2 {
namespace {

using json = nlohmann::json;

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A file written under a temporary name and renamed onto `path` by commit(); destroyed without
// commit() it removes the temporary, so readers never see a partial file at `path`.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path)
      : path_(path), tmp_(path + ".tmp." + std::to_string(::getpid())) {
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) throw Error(path_ + ": cannot create " + tmp_ + ": " + std::strerror(errno));
  }
  ~AtomicFile() {
    if (f_) std::fclose(f_);
    if (!committed_) std::remove(tmp_.c_str());
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t n, const std::string& what) {
    if (n != 0 && std::fwrite(data, 1, n, f_) != n) {
      throw Error(path_ + ": write failed (" + what + "): " + std::strerror(errno));
    }
  }

  void commit() {
    // fclose flushes; a full disk often shows up only here.
    int rc = std::fclose(f_);
    f_ = nullptr;
    if (rc != 0) throw Error(path_ + ": write failed on close: " + std::strerror(errno));
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
      throw Error(path_ + ": cannot rename " + tmp_ + " into place: " + std::strerror(errno));
    }
    committed_ = true;
  }

 private:
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  bool committed_ = false;
};

// Appends `n` values as `dtype` little-endian elements.
void encode(DType dtype, const float* v, size_t n, std::vector<uint8_t>* out) {
  const size_t es = dtype_size(dtype);
  out->resize(n * es);
  uint8_t* p = out->data();
  for (size_t i = 0; i < n; ++i) {
    if (dtype == DType::F32) {
      std::memcpy(p + 4 * i, &v[i], 4);
    } else if (dtype == DType::F8_E4M3) {
      p[i] = f32_to_e4m3(v[i]);
    } else {
      uint16_t h = dtype == DType::F16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]);
      std::memcpy(p + 2 * i, &h, 2);
    }
  }
}

}  // namespace

uint16_t f32_to_bf16(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    // NaN: truncating could clear every mantissa bit left and make it inf; force the quiet bit.
    return static_cast<uint16_t>((u >> 16) | 0x40u);
  }
  // Adding 0x7fff plus the lowest kept bit rounds half to even; a carry out of the mantissa bumps
  // the exponent, which is exactly right (and turns values above bf16's max into inf).
  const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

uint8_t f32_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= 448.f) return sign | 0x7e;  // satfinite: 448 = 1.75 * 2^8 is the largest finite
  // Below the smallest normal 2^-6 the grid spacing is 2^-9: a * 2^9 (exact) rounded to nearest
  // even (nearbyint, default rounding mode) is the subnormal's bit pattern, and 8 = 0x08 is the
  // smallest normal, which is exactly right when rounding carries up.
  if (a < 0x1p-6f) return sign | static_cast<uint8_t>(std::nearbyint(a * 0x1p9f));
  // a in [2^b, 2^(b+1)), b in [-6, 8]: spacing 2^(b-3), so a / spacing (exact) is in [8, 16);
  // rounded, 16 carries into the next binade.
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1)
  const int b = e - 1;
  const int units = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - b)));
  const int bits = units == 16 ? (b + 8) << 3 : (b + 7) << 3 | (units - 8);
  return sign | static_cast<uint8_t>(std::min(bits, 0x7e));  // 0x7e: 448 (0x7f is NaN)
}

uint16_t f32_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;  // magnitude bits

  if (a >= 0x7f800000u) {  // inf or NaN; a NaN keeps its top payload bits and is made quiet
    const uint32_t nan_bits = a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0;
    return static_cast<uint16_t>(sign | 0x7c00u | nan_bits);
  }
  // 65520 is halfway between fp16's max 65504 (odd mantissa) and 65536, so it and everything
  // above rounds (to even) to inf.
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);
  if (a >= 0x38800000u) {  // >= 2^-14: an fp16 normal
    uint32_t r = ((a >> 23) - (127 - 15)) << 10 | ((a >> 13) & 0x3ffu);
    const uint32_t rest = a & 0x1fffu;                         // the 13 dropped mantissa bits
    if (rest > 0x1000u || (rest == 0x1000u && (r & 1u))) ++r;  // a carry into the exponent is right
    return static_cast<uint16_t>(sign | r);
  }
  // 2^-25 is halfway between 0 and the smallest subnormal 2^-24 and rounds to even (zero).
  if (a <= 0x33000000u) return sign;
  // fp16 subnormal: value / 2^-24 = m * 2^(e - 150 + 24), i.e. m >> (126 - e), shift in [14, 24].
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;
  uint32_t r = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (r & 1u))) ++r;  // 0x400 is the smallest normal: still right
  return static_cast<uint16_t>(sign | r);
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const std::string where = path + ": tensor '" + t.name + "'";
    if (t.name.empty() || t.name == "__metadata__") throw Error(where + ": invalid tensor name");
    if (!seen.insert(t.name).second) throw Error(where + ": duplicate tensor name");
    if (t.dtype == DType::Other) {
      throw Error(where + ": can only write F32, F16, BF16, F8_E4M3 or I32");
    }
    const size_t given = t.dtype == DType::I32 ? t.ints.size() : t.values.size();
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) throw Error(where + ": negative dimension in shape " + shape_to_string(t.shape));
      if (d != 0 && numel > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) {
        throw Error(where + ": shape " + shape_to_string(t.shape) + " is too large");
      }
      numel *= static_cast<uint64_t>(d);
    }
    if (numel != given) {
      throw Error(where + ": has " + std::to_string(given) + " values but shape " +
                  shape_to_string(t.shape) + " needs " + std::to_string(numel));
    }
    const uint64_t bytes = numel * dtype_size(t.dtype);
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::map<std::string, std::string> md = metadata;
  md.emplace("format", "pt");
  header["__metadata__"] = md;

  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // e.g. a tensor name that is not valid UTF-8
    throw Error(path + ": cannot encode header: " + e.what());
  }
  // Pad with spaces (valid JSON whitespace, as Hugging Face does) so the data section starts
  // 8-byte aligned and an mmap'ed reader can use the elements in place.
  text.append((8 - text.size() % 8) % 8, ' ');

  AtomicFile out(path);
  uint8_t len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  out.write(len, 8, "header length");
  out.write(text.data(), text.size(), "header");
  // Convert in chunks so that writing a large tensor needs only a small extra buffer.
  constexpr size_t kChunk = 1 << 16;
  std::vector<uint8_t> buf;
  for (const TensorToWrite& t : tensors) {
    if (t.dtype == DType::I32) {  // little-endian host: the ints are the file's bytes
      out.write(t.ints.data(), t.ints.size() * sizeof(int32_t), "tensor '" + t.name + "'");
      continue;
    }
    for (size_t i = 0; i < t.values.size(); i += kChunk) {
      const size_t m = std::min(kChunk, t.values.size() - i);
      encode(t.dtype, t.values.data() + i, m, &buf);
      out.write(buf.data(), buf.size(), "tensor '" + t.name + "'");
    }
  }
  out.commit();
}

void write_safetensors_index(const std::string& path,
                             const std::map<std::string, std::string>& weight_map,
                             uint64_t total_size) {
  json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  std::string text;
  try {
    text = index.dump(2) + "\n";
  } catch (const json::exception& e) {
    throw Error(path + ": cannot encode index: " + e.what());
  }
  AtomicFile out(path);
  out.write(text.data(), text.size(), "index");
  out.commit();
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) throw Error(path + ": not valid JSON");
  return j;
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw Error(path + ": write failed");
}

}  // namespace llama2
