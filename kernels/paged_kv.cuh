// The paged KV cache of one layer on one rank, as the kernels see it (same layout as
// llama2::cpu::KvLayerView): block b holds tokens [b*block_size, (b+1)*block_size) of whichever
// sequence owns it; a sequence's block table maps its position p to block table[p / block_size],
// offset p % block_size. A token's slot is block * block_size + offset.
#pragma once

namespace llama2::kernels {

template <typename T>
struct PagedKvCache {
  T* k = nullptr;  // [num_blocks, kv_heads, block_size, head_dim]
  T* v = nullptr;  // [num_blocks, kv_heads, block_size, head_dim]
  int num_blocks = 0;
  int kv_heads = 0;  // KV heads on this rank
  int block_size = 0;
  int head_dim = 0;
};

}  // namespace llama2::kernels
