#include "rank/torch_file.h"

#include <map>

#include "common/check.h"
#include "rank/torch_pickle.h"
#include "rank/zip_archive.h"

namespace llama2 {
namespace {

// The engine's DType of a torch storage class, and the element size of every class torch.save
// names (0: unknown, refused).
DType storage_dtype(const std::string& type) {
  if (type == "HalfStorage") return DType::F16;
  if (type == "BFloat16Storage") return DType::BF16;
  if (type == "FloatStorage") return DType::F32;
  if (type == "IntStorage") return DType::I32;
  return DType::Other;
}
size_t storage_element_size(const std::string& type) {
  static const std::map<std::string, size_t> sizes = {
      {"HalfStorage", 2},          {"BFloat16Storage", 2},     {"FloatStorage", 4},
      {"DoubleStorage", 8},        {"LongStorage", 8},         {"IntStorage", 4},
      {"ShortStorage", 2},         {"CharStorage", 1},         {"ByteStorage", 1},
      {"BoolStorage", 1},          {"ComplexFloatStorage", 8}, {"ComplexDoubleStorage", 16},
      {"Float8_e4m3fnStorage", 1}, {"Float8_e5m2Storage", 1}};
  auto it = sizes.find(type);
  return it == sizes.end() ? 0 : it->second;
}

// The archive's folder (everything before "/data.pkl"): torch names it after the file.
std::string archive_prefix(const std::vector<ZipEntry>& entries, const std::string& path) {
  std::string prefix;
  int found = 0;
  for (const ZipEntry& e : entries) {
    const std::string tail = "data.pkl";
    if (e.name.size() >= tail.size() &&
        e.name.compare(e.name.size() - tail.size(), tail.size(), tail) == 0 &&
        e.name.find('/') == e.name.size() - tail.size() - 1) {
      prefix = e.name.substr(0, e.name.size() - tail.size());
      ++found;
    }
  }
  if (found != 1) {
    throw Error(path + ": a zip archive with " + std::to_string(found) +
                " top-level <archive>/data.pkl records; a torch.save file has exactly one");
  }
  return prefix;
}

// A pointer, not a reference: g++ 13's -Wdangling-reference flags a reference returned from a
// call whose arguments include temporaries, although the entry lives in `by_name`.
const ZipEntry* stored_entry(const std::map<std::string, const ZipEntry*>& by_name,
                             const std::string& name, const std::string& path,
                             const std::string& needed_by) {
  auto it = by_name.find(name);
  if (it == by_name.end()) {
    throw Error(path + ": zip record '" + name + "' (" + needed_by + ") is missing");
  }
  const ZipEntry& e = *it->second;
  if (e.flags & 1) throw Error(path + ": zip record '" + name + "' is encrypted");
  if (e.method != 0 || e.size != e.uncompressed_size) {
    throw Error(path + ": zip record '" + name + "' is compressed (method " +
                std::to_string(e.method) +
                "); torch.save stores records uncompressed, and only such files are "
                "memory-mapped here");
  }
  return &e;
}

// Row-major contiguous strides of `shape` (dimensions of size 1 may have any stride).
bool contiguous(const std::vector<int64_t>& shape, const std::vector<int64_t>& stride) {
  if (shape.size() != stride.size()) return false;
  int64_t expect = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && stride[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

}  // namespace

TorchFile::TorchFile(const std::string& path) : TensorFile(path, "PyTorch zip checkpoint", 22) {
  data_ = map_begin();
  data_size_ = map_size();
  const std::vector<ZipEntry> entries = read_zip_directory(data_, data_size_, path);
  std::map<std::string, const ZipEntry*> by_name;
  for (const ZipEntry& e : entries) by_name[e.name] = &e;
  const std::string prefix = archive_prefix(entries, path);
  if (auto bo = by_name.find(prefix + "byteorder"); bo != by_name.end()) {
    const ZipEntry& e = *stored_entry(by_name, bo->first, path, "byte order");
    const std::string order(reinterpret_cast<const char*>(data_ + e.data_offset), e.size);
    if (order != "little") {
      throw Error(path + ": byteorder record says '" + order +
                  "'; only little-endian files are read");
    }
  }
  const ZipEntry& pkl = *stored_entry(by_name, prefix + "data.pkl", path, "the pickle");
  const std::vector<PickledTensor> pickled = parse_state_dict_pickle(
      data_ + pkl.data_offset, static_cast<size_t>(pkl.size), path + ": " + pkl.name);
  for (const PickledTensor& p : pickled) {
    const std::string where = path + ": tensor '" + p.name + "'";
    const size_t es = storage_element_size(p.storage_type);
    if (es == 0) throw Error(where + ": unknown storage type torch." + p.storage_type);
    const std::string record = prefix + "data/" + p.storage_key;
    const ZipEntry& e = *stored_entry(by_name, record, path, "the storage of '" + p.name + "'");
    uint64_t storage_bytes = 0;
    if (!byte_count({p.storage_numel}, es, &storage_bytes) || storage_bytes != e.size) {
      throw Error(where + ": its storage record '" + record + "' holds " + std::to_string(e.size) +
                  " bytes, but the pickle says " + std::to_string(p.storage_numel) +
                  " elements of " + std::to_string(es) + " bytes (truncated or corrupt file)");
    }
    if (!contiguous(p.shape, p.stride)) {
      throw Error(where + " is a non-contiguous view (shape " + shape_to_string(p.shape) +
                  ", stride " + shape_to_string(p.stride) +
                  "); save tensor.contiguous() (or clone()) instead");
    }
    uint64_t bytes = 0;
    if (!byte_count(p.shape, es, &bytes) || p.offset < 0 ||
        static_cast<uint64_t>(p.offset) > e.size / es || bytes > e.size - p.offset * es) {
      throw Error(where + ": elements [" + std::to_string(p.offset) + ", +" +
                  shape_to_string(p.shape) + ") run past its storage of " +
                  std::to_string(p.storage_numel) + " elements");
    }
    TensorInfo t;
    t.name = p.name;
    t.dtype = storage_dtype(p.storage_type);
    t.dtype_name = t.dtype == DType::Other ? "torch." + p.storage_type : dtype_name(t.dtype);
    t.shape = p.shape;
    t.begin = e.data_offset + static_cast<uint64_t>(p.offset) * es;
    t.end = t.begin + bytes;
    t.file = this;
    tensors_[p.name] = std::move(t);
  }
}

}  // namespace llama2
