#include "coordinator/scheduler/block_allocator.h"

#include "common/check.h"

namespace llama2 {

BlockAllocator::BlockAllocator(int num_blocks, int block_size) : block_size_(block_size) {
  LLAMA2_CHECK(num_blocks > 0 && block_size > 0);
  free_.reserve(num_blocks);
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool BlockAllocator::ensure(std::vector<int>* table, int positions) {
  const int need = blocks_for(positions, block_size_) - static_cast<int>(table->size());
  if (need <= 0) return true;
  if (need > static_cast<int>(free_.size())) return false;
  for (int i = 0; i < need; ++i) {
    table->push_back(free_.back());
    free_.pop_back();
  }
  used_ += need;
  return true;
}

void BlockAllocator::release(std::vector<int>* table) {
  for (int b : *table) free_.push_back(b);
  used_ -= static_cast<int>(table->size());
  LLAMA2_CHECK(used_ >= 0);
  table->clear();
}

}  // namespace llama2
