// What every checkpoint file format shares once parsed: element types, the description of one
// stored tensor (TensorInfo), and a read-only memory map of the file (TensorFile) in which each
// tensor is a contiguous row-major byte range. Safetensors (rank/safetensors.h) and PyTorch's zip
// files (rank/torch_file.h) are the two formats; rank/weight_store.h reads tensors from either.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace llama2 {

// Element types we can convert to fp32. Every other dtype ("I8", "F64", "BOOL", torch's
// LongStorage, ...) parses as Other and is an error only when the tensor is read. F8_E4M3
// (torch.float8_e4m3fn) is read only as the projections of an FP8 checkpoint, whose values mean
// nothing without their weight_scale (rank/fp8_checkpoint.h applies it); read_block_f32 gives the
// unscaled values.
// I32 holds the packed 4-bit weights and zero points of AWQ / GPTQ checkpoints
// (rank/int4_checkpoint.h), read raw, never converted to fp32.
enum class DType { F32, F16, BF16, F8_E4M3, I32, Other };

// Bytes per element; 0 for Other (its size is not needed because it is never read).
size_t dtype_size(DType dtype);
// "F32", "F16", "BF16", "F8_E4M3"; "other" for Other (TensorInfo::dtype_name keeps the file's own
// string).
const char* dtype_name(DType dtype);
// The DType for a safetensors header dtype string; Other when unsupported.
DType dtype_from_name(const std::string& name);

// Exact software conversions (subnormals, infinities and NaN included).
float f16_to_f32(uint16_t h);
float bf16_to_f32(uint16_t b);
// e4m3 "fn" (no infinities; 0x7f/0xff are NaN; largest finite 448): every value is exact in fp32.
float e4m3_to_f32(uint8_t b);
// Converts `n` stored elements at `src` (any alignment) to fp32; dtype must not be I32 or Other.
void convert_to_f32(DType dtype, const uint8_t* src, size_t n, float* out);

class TensorFile;

struct TensorInfo {
  std::string name;
  std::string dtype_name;  // as the file names it, e.g. "BF16", "I8" or "torch.LongStorage"
  DType dtype = DType::Other;
  std::vector<int64_t> shape;   // row-major; [] for a scalar
  uint64_t begin = 0, end = 0;  // byte offsets into file->data(), [begin, end)
  const TensorFile* file = nullptr;

  int64_t numel() const;
};

// "[172, 64]"
std::string shape_to_string(const std::vector<int64_t>& shape);
// numel * elem_size into *out, or false on overflow.
bool byte_count(const std::vector<int64_t>& shape, size_t elem_size, uint64_t* out);

// One checkpoint file, mmap'ed read-only (opening a 13 GB file costs only its index), with the
// tensors it holds. Subclasses parse their format in their constructor and fill tensors_.
class TensorFile {
 public:
  virtual ~TensorFile();
  TensorFile(const TensorFile&) = delete;
  TensorFile& operator=(const TensorFile&) = delete;

  const std::string& path() const { return path_; }
  // nullptr when the file has no such tensor.
  const TensorInfo* find(const std::string& name) const;
  // All tensor names, sorted.
  std::vector<std::string> names() const;
  // Safetensors' "__metadata__" strings; empty for other formats.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // The bytes TensorInfo::begin/end index (safetensors: its data section; torch: the whole file).
  const uint8_t* data() const { return data_; }
  uint64_t data_size() const { return data_size_; }

  // Bytes copied out of this file by WeightStore's reads (which add to it), for the start-up
  // report and the tests that prove a rank reads only its own files.
  uint64_t bytes_copied() const { return bytes_copied_.load(std::memory_order_relaxed); }
  void add_bytes_copied(uint64_t n) const { bytes_copied_.fetch_add(n, std::memory_order_relaxed); }

 protected:
  // Maps `path` (Error naming it and `kind`, e.g. "safetensors file", when it cannot); files
  // shorter than `min_size` bytes are refused as truncated.
  TensorFile(const std::string& path, const char* kind, uint64_t min_size);
  const uint8_t* map_begin() const { return static_cast<const uint8_t*>(map_); }
  uint64_t map_size() const { return map_size_; }

  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t data_size_ = 0;
  std::map<std::string, TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;

 private:
  void* map_ = nullptr;  // the whole file, PROT_READ, MAP_PRIVATE
  size_t map_size_ = 0;
  mutable std::atomic<uint64_t> bytes_copied_{0};
};

}  // namespace llama2
