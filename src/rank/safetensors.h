// Reading Hugging Face safetensors checkpoints: one file (SafetensorsFile) or a model directory,
// sharded or not (WeightStore).
//
// Format: [u64 little-endian N][N bytes of UTF-8 JSON header][data section]. The header maps each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets relative to the start of
// the data section; the optional "__metadata__" key maps strings to strings.
//
// Files are mmap'ed read-only, so opening a 13 GB checkpoint costs only the header parse; a rank
// then copies just the rows/columns of its tensor-parallel shard (read_block_*), and the kernel
// pages in only those bytes. bytes_copied() lets tests prove that a shard read stays inside its
// block.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace llama2 {

// Element types we can convert to fp32. Every other safetensors dtype ("I8", "F64", "BOOL", ...)
// parses as Other and is an error only when the tensor is read. F8_E4M3 (torch.float8_e4m3fn) is
// read only as the projections of an FP8 checkpoint, whose values mean nothing without their
// weight_scale (rank/fp8_checkpoint.h applies it); read_block_f32 gives the unscaled values.
enum class DType { F32, F16, BF16, F8_E4M3, Other };

// Bytes per element; 0 for Other (its size is not needed because it is never read).
size_t dtype_size(DType dtype);
// "F32", "F16", "BF16", "F8_E4M3"; "other" for Other (TensorInfo::dtype_name keeps the file's own
// string).
const char* dtype_name(DType dtype);
// The DType for a header dtype string; Other when unsupported.
DType dtype_from_name(const std::string& name);

// Exact software conversions (subnormals, infinities and NaN included).
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t b);
// e4m3 "fn" (no infinities; 0x7f/0xff are NaN; largest finite 448): every value is exact in fp32.
float e4m3_to_f32(uint8_t b);

class SafetensorsFile;

struct TensorInfo {
  std::string name;
  std::string dtype_name;  // as written in the header, e.g. "BF16" or "I8"
  DType dtype = DType::Other;
  std::vector<int64_t> shape;   // row-major; [] for a scalar
  uint64_t begin = 0, end = 0;  // byte offsets into the file's data section, [begin, end)
  const SafetensorsFile* file = nullptr;

  int64_t numel() const;
};

// "[172, 64]"
std::string shape_to_string(const std::vector<int64_t>& shape);

// One mmap'ed .safetensors file with its validated header.
class SafetensorsFile {
 public:
  // Throws Error naming `path` when the file is missing, not a safetensors file, or inconsistent
  // (every tensor's byte range must lie inside the data section and match shape x dtype size).
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // nullptr when the header has no such tensor.
  const TensorInfo* find(const std::string& name) const;
  // All tensor names, sorted (JSON object order carries no meaning).
  std::vector<std::string> names() const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Start of the data section (the first byte after the header) and its length.
  const uint8_t* data() const { return data_; }
  uint64_t data_size() const { return data_size_; }

 private:
  std::string path_;
  void* map_ = nullptr;  // the whole file, PROT_READ, MAP_PRIVATE
  size_t map_size_ = 0;
  const uint8_t* data_ = nullptr;
  uint64_t data_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;

  void parse_header(const char* json, size_t size);
};

// The weights of one model directory: model.safetensors, or the shards listed by
// model.safetensors.index.json. Tensor names are the Hugging Face ones
// ("model.layers.3.mlp.up_proj.weight").
class WeightStore {
 public:
  static WeightStore open(const std::string& model_dir);

  WeightStore(WeightStore&& other) noexcept;
  WeightStore& operator=(WeightStore&& other) noexcept;
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;
  ~WeightStore();

  const TensorInfo& get(const std::string& name) const;
  bool has(const std::string& name) const;
  // Throws "FILE: tensor 'X' has shape [..], expected [..]".
  void expect_shape(const std::string& name, const std::vector<int64_t>& expected) const;

  // Copies the block [row_begin, row_end) x [col_begin, col_end) of a tensor seen as a row-major
  // matrix [rows, cols] (1-D [n] is [1, n], a scalar is [1, 1]) into `out`, laid out
  // [row_end - row_begin, col_end - col_begin] row-major, converted to fp32. Reads only the block's
  // bytes: one contiguous range per row, or a single range when whole rows are requested.
  void read_block_f32(const std::string& name, int64_t row_begin, int64_t row_end,
                      int64_t col_begin, int64_t col_end, float* out) const;
  // The same block with its elements copied as stored (F32, F16, BF16 or F8_E4M3 bytes), for
  // uploading to the GPU and converting there.
  void read_block_raw(const std::string& name, int64_t row_begin, int64_t row_end,
                      int64_t col_begin, int64_t col_end, void* out) const;
  // The whole tensor as fp32, `out` holding numel() floats.
  void read_vector_f32(const std::string& name, float* out) const;

  // Running total of data-section bytes copied by the read_* methods.
  uint64_t bytes_copied() const { return bytes_copied_.load(std::memory_order_relaxed); }

  // File names relative to dir(), in the order they were opened.
  std::vector<std::string> files() const;
  std::string dir() const { return dir_; }

 private:
  WeightStore() = default;

  struct Block;  // a validated request, in elements
  Block check_block(const TensorInfo& t, int64_t row_begin, int64_t row_end, int64_t col_begin,
                    int64_t col_end) const;

  std::string dir_;
  std::vector<std::string> file_names_;
  // unique_ptr keeps each file (and the TensorInfo::file pointers into it) at a fixed address.
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorInfo*> tensors_;  // points into files_
  // Atomic so that ranks may load tensors from several threads.
  mutable std::atomic<uint64_t> bytes_copied_{0};
};

}  // namespace llama2
