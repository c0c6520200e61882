// Rank 0's bookkeeping of the paged KV cache: which blocks are free and which belong to which
// sequence. The block ids it hands out travel to every rank inside the step plan.
#pragma once

#include <vector>

namespace llama2 {

class BlockAllocator {
 public:
  BlockAllocator(int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(free_.size()) + used_; }
  int free_blocks() const { return static_cast<int>(free_.size()); }
  int used_blocks() const { return used_; }
  static int blocks_for(int positions, int block_size) {
    return (positions + block_size - 1) / block_size;
  }

  // Grows `table` so it covers `positions` tokens; false (table unchanged) if blocks ran out.
  bool ensure(std::vector<int>* table, int positions);
  // Returns every block of `table` to the free list and clears it.
  void release(std::vector<int>* table);

 private:
  int block_size_;
  int used_ = 0;
  std::vector<int> free_;  // LIFO: recently freed blocks are reused first (warm in cache)
};

}  // namespace llama2
