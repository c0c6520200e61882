#include "rank/safetensors.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "common/check.h"

namespace llama2 {
namespace {

using json = nlohmann::json;

// Hugging Face's reader refuses headers above 100 MB; anything larger is a corrupt length field,
// and refusing it early avoids trying to parse gigabytes of tensor data as JSON.
constexpr uint64_t kMaxHeaderBytes = 100ull * 1000 * 1000;

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

}  // namespace

// ---- SafetensorsFile ----

SafetensorsFile::SafetensorsFile(const std::string& path)
    : TensorFile(path, "safetensors file", 8) {
  const uint8_t* bytes = map_begin();
  const uint64_t size = map_size();
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxHeaderBytes) {
    throw Error(path + ": header length " + std::to_string(n) + " bytes is absurdly large (limit " +
                std::to_string(kMaxHeaderBytes) + "); not a safetensors file?");
  }
  if (n > size - 8) {
    throw Error(path + ": truncated: header length is " + std::to_string(n) +
                " bytes but the file has only " + std::to_string(size - 8) +
                " bytes after the 8-byte length");
  }
  data_ = bytes + 8 + n;
  data_size_ = size - 8 - n;
  parse_header(reinterpret_cast<const char*>(bytes + 8), static_cast<size_t>(n));
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

}  // namespace llama2
