#include "rank/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/check.h"

// The data section is read by memcpy'ing elements straight into host integers/floats.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");

namespace llama2 {
namespace {

using json = nlohmann::json;

// Hugging Face's reader refuses headers above 100 MB; anything larger is a corrupt length field,
// and refusing it early avoids trying to parse gigabytes of tensor data as JSON.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

std::string errno_text(int err) {
  return std::strerror(err);
}

// A JSON number that is a non-negative integer fitting in `limit`.
bool as_count(const json& v, uint64_t limit, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
  } else if (v.is_number_integer()) {
    int64_t s = v.get<int64_t>();
    if (s < 0) return false;
    *out = static_cast<uint64_t>(s);
  } else {
    return false;
  }
  return *out <= limit;
}

// numel * elem_size, or false on overflow.
bool byte_count(const std::vector<int64_t>& shape, size_t elem_size, uint64_t* out) {
  uint64_t n = elem_size;
  for (int64_t d : shape) {
    uint64_t ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > std::numeric_limits<uint64_t>::max() / ud) return false;
    n *= ud;
  }
  *out = n;
  return true;
}

// Converts `n` stored elements at `src` (any alignment) to fp32.
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
    case DType::Other:
      break;
  }
  LLAMA2_CHECK(false && "convert_to_f32 called on an unsupported dtype");
}

}  // namespace

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

// ---- SafetensorsFile ----

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open safetensors file: " + errno_text(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error(path + ": cannot stat safetensors file: " + errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    throw Error(path + ": file has " + std::to_string(size) +
                " bytes, shorter than the 8-byte safetensors header length");
  }
  map_size_ = static_cast<size_t>(size);
  map_ = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  int map_err = errno;
  ::close(fd);  // the mapping keeps its own reference to the file
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw Error(path + ": mmap failed: " + errno_text(map_err));
  }

  // The destructor does not run when a constructor throws, so unmap here on a bad header.
  try {
    const uint8_t* bytes = static_cast<const uint8_t*>(map_);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
    if (n > kMaxHeaderBytes) {
      throw Error(path + ": header length " + std::to_string(n) +
                  " bytes is absurdly large (limit " + std::to_string(kMaxHeaderBytes) +
                  "); not a safetensors file?");
    }
    if (n > size - 8) {
      throw Error(path + ": truncated: header length is " + std::to_string(n) +
                  " bytes but the file has only " + std::to_string(size - 8) +
                  " bytes after the 8-byte length");
    }
    data_ = bytes + 8 + n;
    data_size_ = size - 8 - n;
    parse_header(reinterpret_cast<const char*>(bytes + 8), static_cast<size_t>(n));
  } catch (...) {
    ::munmap(map_, map_size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

void SafetensorsFile::parse_header(const char* text, size_t size) {
  json header;
  try {
    header = json::parse(text, text + size);
  } catch (const json::exception& e) {
    throw Error(path_ + ": header is not valid JSON: " + e.what());
  }
  if (!header.is_object()) throw Error(path_ + ": header is not a JSON object");

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "__metadata__") {
      // Only string values are meaningful (the format says map<string, string>); others are
      // ignored rather than rejected because nothing here depends on them.
      if (v.is_object()) {
        for (auto m = v.begin(); m != v.end(); ++m) {
          if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
        }
      }
      continue;
    }
    const std::string where = path_ + ": tensor '" + key + "'";
    if (!v.is_object()) throw Error(where + ": header entry is not a JSON object");

    TensorInfo t;
    t.name = key;
    t.file = this;

    auto dt = v.find("dtype");
    if (dt == v.end() || !dt->is_string()) throw Error(where + ": missing string \"dtype\"");
    t.dtype_name = dt->get<std::string>();
    t.dtype = dtype_from_name(t.dtype_name);

    auto sh = v.find("shape");
    if (sh == v.end() || !sh->is_array()) throw Error(where + ": missing \"shape\" array");
    for (const json& d : *sh) {
      uint64_t dim;
      if (!as_count(d, static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), &dim)) {
        throw Error(where + ": \"shape\" must hold non-negative integers, got " + sh->dump());
      }
      t.shape.push_back(static_cast<int64_t>(dim));
    }

    auto off = v.find("data_offsets");
    uint64_t begin = 0, end = 0;
    if (off == v.end() || !off->is_array() || off->size() != 2 ||
        !as_count((*off)[0], std::numeric_limits<uint64_t>::max(), &begin) ||
        !as_count((*off)[1], std::numeric_limits<uint64_t>::max(), &end) || begin > end) {
      throw Error(where + ": \"data_offsets\" must be [begin, end] with 0 <= begin <= end, got " +
                  (off == v.end() ? std::string("nothing") : off->dump()));
    }
    t.begin = begin;
    t.end = end;
    if (end > data_size_) {
      throw Error(path_ + ": truncated: tensor '" + key + "' needs bytes up to " +
                  std::to_string(end) + " but the file's data section has only " +
                  std::to_string(data_size_) + " bytes");
    }
    if (t.dtype != DType::Other) {
      uint64_t need = 0;
      if (!byte_count(t.shape, dtype_size(t.dtype), &need)) {
        throw Error(where + ": shape " + shape_to_string(t.shape) + " is too large");
      }
      if (need != end - begin) {
        throw Error(where + ": data_offsets [" + std::to_string(begin) + ", " +
                    std::to_string(end) + "] hold " + std::to_string(end - begin) +
                    " bytes, expected " + std::to_string(need) + " for shape " +
                    shape_to_string(t.shape) + " of dtype " + t.dtype_name);
      }
    }
    tensors_.emplace(key, std::move(t));
  }
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(tensors_.size());
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

// ---- WeightStore ----

// A read request checked against the tensor, in elements of the [rows, cols] matrix view.
struct WeightStore::Block {
  const uint8_t* base;  // the tensor's first byte in the mapping
  size_t elem_size;
  int64_t cols;
  int64_t r0, r1, c0, c1;
};

WeightStore::WeightStore(WeightStore&& other) noexcept
    : dir_(std::move(other.dir_)),
      file_names_(std::move(other.file_names_)),
      files_(std::move(other.files_)),
      tensors_(std::move(other.tensors_)),
      bytes_copied_(other.bytes_copied_.load()) {}

WeightStore& WeightStore::operator=(WeightStore&& other) noexcept {
  dir_ = std::move(other.dir_);
  file_names_ = std::move(other.file_names_);
  files_ = std::move(other.files_);
  tensors_ = std::move(other.tensors_);
  bytes_copied_.store(other.bytes_copied_.load());
  return *this;
}

WeightStore::~WeightStore() = default;

WeightStore WeightStore::open(const std::string& model_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) {
    throw Error(model_dir + ": model directory does not exist or is not a directory");
  }
  WeightStore ws;
  ws.dir_ = model_dir;
  const fs::path dir(model_dir);
  const std::string index_path = (dir / "model.safetensors.index.json").string();
  const std::string single_path = (dir / "model.safetensors").string();

  if (fs::exists(index_path, ec)) {
    std::ifstream in(index_path);
    if (!in) throw Error(index_path + ": cannot read: " + errno_text(errno));
    std::stringstream buf;
    buf << in.rdbuf();
    json index;
    try {
      index = json::parse(buf.str());
    } catch (const json::exception& e) {
      throw Error(index_path + ": not valid JSON: " + e.what());
    }
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      throw Error(index_path + ": expected a JSON object with a \"weight_map\" object");
    }
    // Open each shard once; sorted file names keep files() deterministic.
    std::map<std::string, SafetensorsFile*> by_name;
    const json& wm = index["weight_map"];
    for (auto it = wm.begin(); it != wm.end(); ++it) {
      if (!it.value().is_string()) {
        throw Error(index_path + ": weight_map entry for tensor '" + it.key() +
                    "' is not a file name string");
      }
      by_name[it.value().get<std::string>()] = nullptr;
    }
    for (auto& kv : by_name) {
      const std::string shard_path = (dir / kv.first).string();
      if (!fs::is_regular_file(shard_path, ec)) {
        throw Error(index_path + ": references shard '" + kv.first + "', but " + shard_path +
                    " does not exist");
      }
      ws.files_.push_back(std::make_unique<SafetensorsFile>(shard_path));
      ws.file_names_.push_back(kv.first);
      kv.second = ws.files_.back().get();
    }
    // The index is authoritative: tensors a shard holds but the index omits are not exposed,
    // as in transformers.
    for (auto it = wm.begin(); it != wm.end(); ++it) {
      const std::string& file = it.value().get_ref<const std::string&>();
      const TensorInfo* t = by_name.at(file)->find(it.key());
      if (!t) {
        throw Error(index_path + " says tensor '" + it.key() + "' is in " + file + ", but " +
                    by_name.at(file)->path() + " has no such tensor");
      }
      ws.tensors_[it.key()] = t;
    }
  } else if (fs::exists(single_path, ec)) {
    ws.files_.push_back(std::make_unique<SafetensorsFile>(single_path));
    ws.file_names_.push_back("model.safetensors");
    const SafetensorsFile& f = *ws.files_.back();
    for (const std::string& name : f.names()) ws.tensors_[name] = f.find(name);
  } else {
    throw Error(model_dir + ": neither model.safetensors nor model.safetensors.index.json found");
  }
  return ws;
}

const TensorInfo& WeightStore::get(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::string list;
    for (size_t i = 0; i < file_names_.size(); ++i) list += (i ? ", " : "") + file_names_[i];
    throw Error("tensor '" + name + "' not found in " + dir_ + " (files: " + list + ")");
  }
  return *it->second;
}

bool WeightStore::has(const std::string& name) const {
  return tensors_.count(name) != 0;
}

void WeightStore::expect_shape(const std::string& name,
                               const std::vector<int64_t>& expected) const {
  const TensorInfo& t = get(name);
  if (t.shape != expected) {
    throw Error(t.file->path() + ": tensor '" + name + "' has shape " + shape_to_string(t.shape) +
                ", expected " + shape_to_string(expected));
  }
}

std::vector<std::string> WeightStore::files() const {
  return file_names_;
}

WeightStore::Block WeightStore::check_block(const TensorInfo& t, int64_t row_begin, int64_t row_end,
                                            int64_t col_begin, int64_t col_end) const {
  const std::string where = "tensor '" + t.name + "' in " + t.file->path();
  if (t.dtype == DType::Other) {
    throw Error(where + " has dtype " + t.dtype_name + "; supported: F32, F16, BF16, F8_E4M3");
  }
  if (t.shape.size() > 2) {
    throw Error(where + " has shape " + shape_to_string(t.shape) +
                "; block reads need a 1-D or 2-D tensor");
  }
  const int64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
  const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  if (row_begin < 0 || row_begin > row_end || row_end > rows || col_begin < 0 ||
      col_begin > col_end || col_end > cols) {
    throw Error(where + ": block rows [" + std::to_string(row_begin) + ", " +
                std::to_string(row_end) + ") cols [" + std::to_string(col_begin) + ", " +
                std::to_string(col_end) + ") is outside its shape " + shape_to_string(t.shape) +
                " (seen as [" + std::to_string(rows) + ", " + std::to_string(cols) + "])");
  }
  return Block{
      t.file->data() + t.begin, dtype_size(t.dtype), cols, row_begin, row_end, col_begin, col_end};
}

void WeightStore::read_block_f32(const std::string& name, int64_t row_begin, int64_t row_end,
                                 int64_t col_begin, int64_t col_end, float* out) const {
  const TensorInfo& t = get(name);
  const Block b = check_block(t, row_begin, row_end, col_begin, col_end);
  const size_t width = static_cast<size_t>(b.c1 - b.c0);
  const size_t height = static_cast<size_t>(b.r1 - b.r0);
  if (width == 0 || height == 0) return;
  if (width == static_cast<size_t>(b.cols)) {
    // Whole rows are one contiguous range.
    convert_to_f32(t.dtype, b.base + static_cast<size_t>(b.r0) * width * b.elem_size,
                   height * width, out);
  } else {
    for (size_t r = 0; r < height; ++r) {
      const size_t first =
          (static_cast<size_t>(b.r0) + r) * static_cast<size_t>(b.cols) + static_cast<size_t>(b.c0);
      convert_to_f32(t.dtype, b.base + first * b.elem_size, width, out + r * width);
    }
  }
  bytes_copied_.fetch_add(height * width * b.elem_size, std::memory_order_relaxed);
}

void WeightStore::read_block_raw(const std::string& name, int64_t row_begin, int64_t row_end,
                                 int64_t col_begin, int64_t col_end, void* out) const {
  const TensorInfo& t = get(name);
  const Block b = check_block(t, row_begin, row_end, col_begin, col_end);
  const size_t row_bytes = static_cast<size_t>(b.c1 - b.c0) * b.elem_size;
  const size_t height = static_cast<size_t>(b.r1 - b.r0);
  if (row_bytes == 0 || height == 0) return;
  uint8_t* dst = static_cast<uint8_t*>(out);
  const size_t src_row_bytes = static_cast<size_t>(b.cols) * b.elem_size;
  if (row_bytes == src_row_bytes) {
    std::memcpy(dst, b.base + static_cast<size_t>(b.r0) * src_row_bytes, height * row_bytes);
  } else {
    for (size_t r = 0; r < height; ++r) {
      std::memcpy(dst + r * row_bytes,
                  b.base + (static_cast<size_t>(b.r0) + r) * src_row_bytes +
                      static_cast<size_t>(b.c0) * b.elem_size,
                  row_bytes);
    }
  }
  bytes_copied_.fetch_add(height * row_bytes, std::memory_order_relaxed);
}

void WeightStore::read_vector_f32(const std::string& name, float* out) const {
  const TensorInfo& t = get(name);
  if (t.dtype == DType::Other) {
    throw Error("tensor '" + name + "' in " + t.file->path() + " has dtype " + t.dtype_name +
                "; supported: F32, F16, BF16, F8_E4M3");
  }
  const size_t n = static_cast<size_t>(t.numel());
  convert_to_f32(t.dtype, t.file->data() + t.begin, n, out);
  bytes_copied_.fetch_add(n * dtype_size(t.dtype), std::memory_order_relaxed);
}

}  // namespace llama2
