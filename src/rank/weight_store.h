// The weights of one model directory, by Hugging Face tensor name ("model.layers.3.mlp.up_proj
// .weight"), whatever the files: safetensors or PyTorch .bin files holding those tensors whole, or
// Meta's model-parallel consolidated.NN.pth files (rank/meta_checkpoint.h), whose tensors are cut
// into pieces across files and stored under other names and, for q/k, in another row order.
//
// Files are mmap'ed; a rank copies only the byte ranges of its tensor-parallel block
// (read_block_*), and the kernel pages in only those bytes. bytes_copied() and the per-file counts
// let tests prove that a shard read stays inside its block and its files.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "rank/tensor_file.h"

namespace llama2 {

// How one tensor the engine reads is stored.
struct StoredTensor {
  // Stored tensors concatenated along `axis` (0: rows, 1: columns of the [rows, cols] view) make
  // the tensor, in order; a single piece is the tensor stored whole.
  std::vector<const TensorInfo*> pieces;
  int axis = 0;
  // > 0: the rows are stored in Meta's RoPE order: every block of rope_head_dim rows (one head)
  // holds the rotation pairs interleaved, rows (2i, 2i+1) rotated together by angle theta_i. Reads
  // present them in Hugging Face's order, the pair (i, i + rope_head_dim / 2): HF row
  // a * rope_head_dim / 2 + i of a head is its stored row 2i + a. 0: rows as stored.
  int rope_head_dim = 0;
};

class WeightStore {
 public:
  // A Hugging Face directory: model.safetensors, or the shards model.safetensors.index.json lists;
  // else pytorch_model.bin, or the shards of pytorch_model.bin.index.json.
  static WeightStore open(const std::string& model_dir);
  // A store over opened files (named file_names[i] relative to `dir`) whose tensors are
  // `tensors`, by Hugging Face name; every piece must point into `files`. Error naming the piece's
  // file and tensor when pieces do not fit together (dtypes, shapes along the other axis, a
  // rope_head_dim that does not divide the rows).
  static WeightStore from_pieces(std::string dir, std::vector<std::string> file_names,
                                 std::vector<std::unique_ptr<TensorFile>> files,
                                 std::map<std::string, StoredTensor> tensors);

  WeightStore(WeightStore&& other) noexcept;
  WeightStore& operator=(WeightStore&& other) noexcept;
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;
  ~WeightStore();

  // The tensor as the engine sees it: dtype, full shape; name and file as stored (for a tensor in
  // pieces: the first piece's name and file, which error messages then cite).
  const TensorInfo& get(const std::string& name) const;
  bool has(const std::string& name) const;
  // Throws "FILE: tensor 'X' has shape [..], expected [..]".
  void expect_shape(const std::string& name, const std::vector<int64_t>& expected) const;

  // Copies the block [row_begin, row_end) x [col_begin, col_end) of a tensor seen as a row-major
  // matrix [rows, cols] (1-D [n] is [1, n], a scalar is [1, 1]) into `out`, laid out
  // [row_end - row_begin, col_end - col_begin] row-major, converted to fp32. Reads only the block's
  // bytes: one contiguous range per row (per piece), or a single range when whole rows of one
  // piece are requested.
  void read_block_f32(const std::string& name, int64_t row_begin, int64_t row_end,
                      int64_t col_begin, int64_t col_end, float* out) const;
  // The same block with its elements copied as stored (F32, F16, BF16 or F8_E4M3 bytes), for
  // uploading to the GPU and converting there.
  void read_block_raw(const std::string& name, int64_t row_begin, int64_t row_end,
                      int64_t col_begin, int64_t col_end, void* out) const;
  // The whole tensor as fp32, `out` holding numel() floats.
  void read_vector_f32(const std::string& name, float* out) const;

  // Total bytes copied by the read_* methods, and per file (in files() order).
  uint64_t bytes_copied() const;
  std::vector<uint64_t> bytes_copied_per_file() const;

  // File names relative to dir(), in the order they were opened.
  std::vector<std::string> files() const { return file_names_; }
  std::string dir() const { return dir_; }

 private:
  WeightStore() = default;

  struct Entry {
    StoredTensor stored;
    TensorInfo whole;  // the assembled description, for a tensor in pieces or in RoPE order
    const TensorInfo& info() const {
      return stored.pieces.size() == 1 && stored.rope_head_dim == 0 ? *stored.pieces[0] : whole;
    }
  };
  const Entry& entry(const std::string& name) const;
  void copy_block(const Entry& e, int64_t r0, int64_t r1, int64_t c0, int64_t c1, void* out,
                  bool to_f32) const;

  std::string dir_;
  std::vector<std::string> file_names_;
  // unique_ptr keeps each file (and the TensorInfo pointers into it) at a fixed address.
  std::vector<std::unique_ptr<TensorFile>> files_;
  std::map<std::string, Entry> tensors_;
};

}  // namespace llama2
