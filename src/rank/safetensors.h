// Reading Hugging Face safetensors files (rank/weight_store.h reads a model directory of them).
//
// Format: [u64 little-endian N][N bytes of UTF-8 JSON header][data section]. The header maps each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]}, offsets relative to the start of
// the data section; the optional "__metadata__" key maps strings to strings.
//
// Files are mmap'ed read-only, so opening a 13 GB checkpoint costs only the header parse; a rank
// then copies just the rows/columns of its tensor-parallel shard, and the kernel pages in only
// those bytes.
#pragma once

#include <string>

#include "rank/tensor_file.h"

namespace llama2 {

// One mmap'ed .safetensors file with its validated header.
class SafetensorsFile final : public TensorFile {
 public:
  // Throws Error naming `path` when the file is missing, not a safetensors file, or inconsistent
  // (every tensor's byte range must lie inside the data section and match shape x dtype size).
  explicit SafetensorsFile(const std::string& path);

 private:
  void parse_header(const char* json, size_t size);
};

}  // namespace llama2
