#include "rank/weight_store.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/check.h"
#include "rank/safetensors.h"
#include "rank/torch_file.h"

namespace llama2 {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

using FileOpener = std::function<std::unique_ptr<TensorFile>(const std::string& path)>;

// The [rows, cols] view of a stored shape: 1-D [n] is [1, n], a scalar [1, 1].
int64_t rows_of(const std::vector<int64_t>& shape) {
  return shape.size() == 2 ? shape[0] : 1;
}
int64_t cols_of(const std::vector<int64_t>& shape) {
  return shape.empty() ? 1 : shape.back();
}

std::string where(const TensorInfo& t) {
  return t.file->path() + ": tensor '" + t.name + "'";
}

// Rows [r0, r1) x columns [c0, c1) of stored tensor `p` into `dst`, whose rows are `dst_stride`
// elements apart: fp32 (to_f32) or the stored bytes.
void copy_piece(const TensorInfo& p, int64_t r0, int64_t r1, int64_t c0, int64_t c1, uint8_t* dst,
                int64_t dst_stride, bool to_f32) {
  const size_t es = dtype_size(p.dtype), out_es = to_f32 ? sizeof(float) : es;
  const int64_t cols = cols_of(p.shape), width = c1 - c0, height = r1 - r0;
  if (width <= 0 || height <= 0) return;
  const uint8_t* base = p.file->data() + p.begin;
  auto copy = [&](const uint8_t* src, size_t n, uint8_t* d) {
    if (to_f32) {
      convert_to_f32(p.dtype, src, n, reinterpret_cast<float*>(d));
    } else {
      std::memcpy(d, src, n * es);
    }
  };
  if (width == cols && dst_stride == cols) {
    // Whole rows are one contiguous range.
    copy(base + static_cast<size_t>(r0 * cols) * es, static_cast<size_t>(height * width), dst);
  } else {
    for (int64_t r = 0; r < height; ++r) {
      copy(base + static_cast<size_t>((r0 + r) * cols + c0) * es, static_cast<size_t>(width),
           dst + static_cast<size_t>(r * dst_stride) * out_es);
    }
  }
  p.file->add_bytes_copied(static_cast<uint64_t>(height * width) * es);
}

// The stored row of Hugging Face row r of a tensor in Meta's RoPE order (StoredTensor).
int64_t rope_stored_row(int64_t r, int64_t head_dim) {
  const int64_t j = r % head_dim, half = head_dim / 2;
  return r - j + (j < half ? 2 * j : 2 * (j - half) + 1);
}

json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot read: " + std::strerror(errno));
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    return json::parse(buf.str());
  } catch (const json::exception& e) {
    throw Error(path + ": not valid JSON: " + e.what());
  }
}

// What WeightStore::open gathers before from_pieces.
struct OpenedFiles {
  std::vector<std::string> names;
  std::vector<std::unique_ptr<TensorFile>> files;
  std::map<std::string, StoredTensor> tensors;
};

// The shards an index (model.safetensors.index.json or pytorch_model.bin.index.json) lists, each
// opened once, and its weight_map's tensors.
void open_indexed(const fs::path& dir, const char* index_name, const FileOpener& opener,
                  OpenedFiles* o) {
  const std::string index_path = (dir / index_name).string();
  const json index = read_json(index_path);
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw Error(index_path + ": expected a JSON object with a \"weight_map\" object");
  }
  // Sorted file names keep files() deterministic.
  std::map<std::string, TensorFile*> by_name;
  const json& wm = index["weight_map"];
  for (auto it = wm.begin(); it != wm.end(); ++it) {
    if (!it.value().is_string()) {
      throw Error(index_path + ": weight_map entry for tensor '" + it.key() +
                  "' is not a file name string");
    }
    by_name[it.value().get<std::string>()] = nullptr;
  }
  std::error_code ec;
  for (auto& kv : by_name) {
    const std::string shard_path = (dir / kv.first).string();
    if (!fs::is_regular_file(shard_path, ec)) {
      throw Error(index_path + ": references shard '" + kv.first + "', but " + shard_path +
                  " does not exist");
    }
    o->files.push_back(opener(shard_path));
    o->names.push_back(kv.first);
    kv.second = o->files.back().get();
  }
  // The index is authoritative: tensors a shard holds but the index omits are not exposed, as in
  // transformers.
  for (auto it = wm.begin(); it != wm.end(); ++it) {
    const std::string& file = it.value().get_ref<const std::string&>();
    const TensorInfo* t = by_name.at(file)->find(it.key());
    if (!t) {
      throw Error(index_path + " says tensor '" + it.key() + "' is in " + file + ", but " +
                  by_name.at(file)->path() + " has no such tensor");
    }
    o->tensors[it.key()].pieces = {t};
  }
}

}  // namespace

WeightStore::WeightStore(WeightStore&& other) noexcept = default;
WeightStore& WeightStore::operator=(WeightStore&& other) noexcept = default;
WeightStore::~WeightStore() = default;

WeightStore WeightStore::open(const std::string& model_dir) {
  std::error_code ec;
  if (!fs::is_directory(model_dir, ec)) {
    throw Error(model_dir + ": model directory does not exist or is not a directory");
  }
  const fs::path dir(model_dir);
  const FileOpener safetensors = [](const std::string& p) {
    return std::make_unique<SafetensorsFile>(p);
  };
  const FileOpener torch = [](const std::string& p) { return std::make_unique<TorchFile>(p); };
  // Hugging Face's own order of preference: safetensors before PyTorch's pickles.
  const struct {
    const char* index;
    const char* single;
    const FileOpener& opener;
  } formats[] = {{"model.safetensors.index.json", "model.safetensors", safetensors},
                 {"pytorch_model.bin.index.json", "pytorch_model.bin", torch}};
  OpenedFiles o;
  for (const auto& f : formats) {
    if (fs::exists(dir / f.index, ec)) {
      open_indexed(dir, f.index, f.opener, &o);
    } else if (fs::exists(dir / f.single, ec)) {
      o.files.push_back(f.opener((dir / f.single).string()));
      o.names.push_back(f.single);
      const TensorFile& file = *o.files.back();
      for (const std::string& name : file.names()) o.tensors[name].pieces = {file.find(name)};
    } else {
      continue;
    }
    return from_pieces(model_dir, std::move(o.names), std::move(o.files), std::move(o.tensors));
  }
  throw Error(model_dir +
              ": neither model.safetensors, model.safetensors.index.json, pytorch_model.bin nor "
              "pytorch_model.bin.index.json found");
}

WeightStore WeightStore::from_pieces(std::string dir, std::vector<std::string> file_names,
                                     std::vector<std::unique_ptr<TensorFile>> files,
                                     std::map<std::string, StoredTensor> tensors) {
  LLAMA2_CHECK(file_names.size() == files.size());
  WeightStore ws;
  ws.dir_ = std::move(dir);
  ws.file_names_ = std::move(file_names);
  ws.files_ = std::move(files);
  for (auto& kv : tensors) {
    StoredTensor& st = kv.second;
    LLAMA2_CHECK(!st.pieces.empty() && (st.axis == 0 || st.axis == 1));
    const TensorInfo& first = *st.pieces[0];
    TensorInfo whole = first;
    const bool assembled = st.pieces.size() > 1 || st.rope_head_dim > 0;
    if (!assembled) {
      ws.tensors_.emplace(kv.first, Entry{std::move(st), std::move(whole)});
      continue;
    }
    whole.begin = whole.end = 0;  // not one range: read through the pieces
    const int other = 1 - st.axis;
    int64_t along = 0;
    for (const TensorInfo* p : st.pieces) {
      if (p->dtype_name != first.dtype_name) {
        throw Error(where(*p) + " is " + p->dtype_name + " but " + where(first) + " is " +
                    first.dtype_name + ": the pieces of one tensor must share a dtype");
      }
      const std::vector<int64_t> view{rows_of(p->shape), cols_of(p->shape)};
      const std::vector<int64_t> first_view{rows_of(first.shape), cols_of(first.shape)};
      if (p->shape.size() > 2 || p->shape.size() != first.shape.size() ||
          view[other] != first_view[other]) {
        throw Error(where(*p) + " has shape " + shape_to_string(p->shape) + ", which does not " +
                    (st.axis == 0 ? "stack under " : "join beside ") + where(first) + " of shape " +
                    shape_to_string(first.shape));
      }
      if (st.rope_head_dim > 0 && (view[0] % st.rope_head_dim != 0 || st.rope_head_dim % 2)) {
        throw Error(where(*p) + " has " + std::to_string(view[0]) + " rows, not whole heads of " +
                    std::to_string(st.rope_head_dim));
      }
      along += view[st.axis];
    }
    if (st.pieces.size() > 1) {
      if (whole.shape.size() == 2) {
        whole.shape[st.axis] = along;
      } else {
        LLAMA2_CHECK(st.axis == 1);  // 1-D pieces side by side
        whole.shape = {along};
      }
    }
    ws.tensors_.emplace(kv.first, Entry{std::move(st), std::move(whole)});
  }
  return ws;
}

const WeightStore::Entry& WeightStore::entry(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::string list;
    for (size_t i = 0; i < file_names_.size(); ++i) list += (i ? ", " : "") + file_names_[i];
    throw Error("tensor '" + name + "' not found in " + dir_ + " (files: " + list + ")");
  }
  return it->second;
}

const TensorInfo& WeightStore::get(const std::string& name) const {
  return entry(name).info();
}

bool WeightStore::has(const std::string& name) const {
  return tensors_.count(name) != 0;
}

void WeightStore::expect_shape(const std::string& name,
                               const std::vector<int64_t>& expected) const {
  const TensorInfo& t = get(name);
  if (t.shape != expected) {
    throw Error(t.file->path() + ": tensor '" + t.name + "' has shape " + shape_to_string(t.shape) +
                ", expected " + shape_to_string(expected));
  }
}

void WeightStore::copy_block(const Entry& e, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                             void* out, bool to_f32) const {
  const TensorInfo& t = e.info();
  const std::string what = "tensor '" + t.name + "' in " + t.file->path();
  if (t.dtype == DType::Other || (to_f32 && t.dtype == DType::I32)) {
    throw Error(what + " has dtype " + t.dtype_name + "; supported: F32, F16, BF16, F8_E4M3" +
                (to_f32 ? "" : ", I32"));
  }
  if (t.shape.size() > 2) {
    throw Error(what + " has shape " + shape_to_string(t.shape) +
                "; block reads need a 1-D or 2-D tensor");
  }
  const int64_t rows = rows_of(t.shape), cols = cols_of(t.shape);
  if (r0 < 0 || r0 > r1 || r1 > rows || c0 < 0 || c0 > c1 || c1 > cols) {
    throw Error(what + ": block rows [" + std::to_string(r0) + ", " + std::to_string(r1) +
                ") cols [" + std::to_string(c0) + ", " + std::to_string(c1) +
                ") is outside its shape " + shape_to_string(t.shape) + " (seen as [" +
                std::to_string(rows) + ", " + std::to_string(cols) + "])");
  }
  const StoredTensor& st = e.stored;
  auto* o = static_cast<uint8_t*>(out);
  const int64_t width = c1 - c0;
  const size_t out_es = to_f32 ? sizeof(float) : dtype_size(t.dtype);
  if (st.axis == 1) {
    int64_t off = 0;
    for (const TensorInfo* p : st.pieces) {
      const int64_t pc = cols_of(p->shape), lo = std::max(c0, off), hi = std::min(c1, off + pc);
      if (lo < hi) {
        copy_piece(*p, r0, r1, lo - off, hi - off, o + static_cast<size_t>(lo - c0) * out_es, width,
                   to_f32);
      }
      off += pc;
    }
    return;
  }
  // Pieces stacked by rows; a run of consecutive stored rows at a time (one row in RoPE order).
  for (int64_t r = r0; r < r1;) {
    const int64_t s = st.rope_head_dim > 0 ? rope_stored_row(r, st.rope_head_dim) : r;
    const int64_t want = st.rope_head_dim > 0 ? 1 : r1 - r;
    int64_t off = 0;
    for (const TensorInfo* p : st.pieces) {
      const int64_t pr = rows_of(p->shape);
      if (s < off + pr) {
        const int64_t n = std::min(want, off + pr - s);
        copy_piece(*p, s - off, s - off + n, c0, c1,
                   o + static_cast<size_t>((r - r0) * width) * out_es, width, to_f32);
        r += n;
        break;
      }
      off += pr;
    }
  }
}

void WeightStore::read_block_f32(const std::string& name, int64_t row_begin, int64_t row_end,
                                 int64_t col_begin, int64_t col_end, float* out) const {
  copy_block(entry(name), row_begin, row_end, col_begin, col_end, out, true);
}

void WeightStore::read_block_raw(const std::string& name, int64_t row_begin, int64_t row_end,
                                 int64_t col_begin, int64_t col_end, void* out) const {
  copy_block(entry(name), row_begin, row_end, col_begin, col_end, out, false);
}

void WeightStore::read_vector_f32(const std::string& name, float* out) const {
  const Entry& e = entry(name);
  const TensorInfo& t = e.info();
  if (t.shape.size() <= 2) {
    copy_block(e, 0, rows_of(t.shape), 0, cols_of(t.shape), out, true);
    return;
  }
  // A tensor of 3 or more dimensions is only ever read whole, from one piece.
  if (t.dtype == DType::Other || t.dtype == DType::I32) {
    throw Error("tensor '" + t.name + "' in " + t.file->path() + " has dtype " + t.dtype_name +
                "; supported: F32, F16, BF16, F8_E4M3");
  }
  LLAMA2_CHECK(e.stored.pieces.size() == 1);
  const size_t n = static_cast<size_t>(t.numel());
  convert_to_f32(t.dtype, t.file->data() + t.begin, n, out);
  t.file->add_bytes_copied(n * dtype_size(t.dtype));
}

uint64_t WeightStore::bytes_copied() const {
  uint64_t n = 0;
  for (const auto& f : files_) n += f->bytes_copied();
  return n;
}

std::vector<uint64_t> WeightStore::bytes_copied_per_file() const {
  std::vector<uint64_t> out;
  for (const auto& f : files_) out.push_back(f->bytes_copied());
  return out;
}

}  // namespace llama2
