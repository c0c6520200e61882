#include "coordinator/scheduler/block_allocator.h"

#include <algorithm>
#include <random>

#include "common/check.h"

namespace llama2 {
namespace {
// splitmix64's finalizer: a bijection of 64-bit values that spreads every input bit.
uint64_t fmix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t random_salt() {
  std::random_device rd;
  return (uint64_t{rd()} << 32) ^ rd();
}
}  // namespace

BlockAllocator::BlockAllocator(int num_blocks, int block_size, uint64_t salt)
    : block_size_(block_size), salt_(salt != 0 ? salt : random_salt()) {
  LLAMA2_CHECK(num_blocks > 0 && block_size > 0);
  blocks_.resize(static_cast<size_t>(num_blocks));
  tokens_.resize(static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size));
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

// Each step is a bijection of the running hash (xor with a value, then fmix64), so two chains
// that reach the same hash through the same tokens had the same hash before them.
uint64_t BlockAllocator::chain_hash(uint64_t prev, const int* tokens) const {
  uint64_t h = prev;
  for (int i = 0; i < block_size_; ++i) {
    h = fmix64(h ^
               (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) + 0x9e3779b97f4a7c15ULL));
  }
  return h;
}

bool BlockAllocator::holds(int block, const int* tokens) const {
  const int* mine = tokens_.data() + static_cast<size_t>(block) * block_size_;
  return std::equal(mine, mine + block_size_, tokens);
}

void BlockAllocator::lru_push_back(int b) {
  Block& k = blocks_[b];
  k.prev = lru_tail_;
  k.next = -1;
  (lru_tail_ >= 0 ? blocks_[lru_tail_].next : lru_head_) = b;
  lru_tail_ = b;
  ++evictable_;
}

void BlockAllocator::lru_unlink(int b) {
  Block& k = blocks_[b];
  (k.prev >= 0 ? blocks_[k.prev].next : lru_head_) = k.next;
  (k.next >= 0 ? blocks_[k.next].prev : lru_tail_) = k.prev;
  k.prev = k.next = -1;
  --evictable_;
}

int BlockAllocator::take() {
  int b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    // Only now does a cached prefix give way: the least recently released one.
    LLAMA2_CHECK(lru_head_ >= 0);
    b = lru_head_;
    lru_unlink(b);
    by_hash_.erase(blocks_[b].hash);
    blocks_[b].cached = false;
    ++counters_.evicted_blocks;
  }
  LLAMA2_CHECK(blocks_[b].refs == 0);
  blocks_[b].refs = 1;
  ++used_;
  return b;
}

bool BlockAllocator::ensure(std::vector<int>* table, int positions) {
  const int need = blocks_for(positions, block_size_) - static_cast<int>(table->size());
  if (need <= 0) return true;
  if (need > free_blocks()) return false;
  for (int i = 0; i < need; ++i) table->push_back(take());
  return true;
}

std::optional<int> BlockAllocator::allocate(const std::vector<int>& prompt, int positions,
                                            bool use_cache, std::vector<int>* table,
                                            PrefixChain* chain, int spare, bool count) {
  LLAMA2_CHECK(table->empty() && !prompt.empty());
  const int need = blocks_for(positions, block_size_);
  PrefixChain c{0, salt_};
  std::vector<int> hits;
  int hit_evictable = 0;  // hits nobody holds now: pinning them takes them out of free_blocks()
  if (use_cache) {
    // The block holding the last prompt token is always computed: its logits pick the first token.
    const int max_hits = (static_cast<int>(prompt.size()) - 1) / block_size_;
    for (int i = 0; i < max_hits; ++i) {
      const int* toks = prompt.data() + static_cast<size_t>(i) * block_size_;
      const uint64_t h = chain_hash(c.hash, toks);
      const auto it = by_hash_.find(h);
      if (it == by_hash_.end() || !holds(it->second, toks)) break;
      hits.push_back(it->second);
      hit_evictable += blocks_[it->second].refs == 0 ? 1 : 0;
      c = PrefixChain{c.blocks + 1, h};
    }
  }
  const int hit_blocks = static_cast<int>(hits.size());
  if (need - hit_blocks > free_blocks() - hit_evictable - spare) return std::nullopt;
  for (int b : hits) {
    if (blocks_[b].refs++ == 0) {
      lru_unlink(b);
      ++used_;
    }
  }
  *table = std::move(hits);
  table->reserve(static_cast<size_t>(need));
  while (static_cast<int>(table->size()) < need) table->push_back(take());
  if (use_cache && count) {
    counters_.queried_tokens += static_cast<int64_t>(prompt.size());
    counters_.hit_tokens += int64_t{hit_blocks} * block_size_;
  }
  *chain = c;
  return hit_blocks * block_size_;
}

void BlockAllocator::cache_full_blocks(const std::vector<int>& tokens, int in_cache,
                                       const std::vector<int>& table, PrefixChain* chain) {
  LLAMA2_CHECK(in_cache <= static_cast<int>(tokens.size()));
  if (chain->blocks == 0) chain->hash = salt_;
  while ((chain->blocks + 1) * block_size_ <= in_cache) {
    const int i = chain->blocks;
    LLAMA2_CHECK(i < static_cast<int>(table.size()));
    const int* toks = tokens.data() + static_cast<size_t>(i) * block_size_;
    const uint64_t h = chain_hash(chain->hash, toks);
    Block& k = blocks_[table[i]];
    // Another sequence computed the same prefix first (admitted before this one was cached):
    // its block stays the registered one, this copy stays private and is freed with its table.
    if (!k.cached && by_hash_.emplace(h, table[i]).second) {
      k.cached = true;
      k.hash = h;
      std::copy(toks, toks + block_size_,
                tokens_.begin() + static_cast<std::ptrdiff_t>(table[i]) * block_size_);
    }
    *chain = PrefixChain{i + 1, h};
  }
}

void BlockAllocator::truncate(std::vector<int>* table, int positions) {
  const size_t keep = static_cast<size_t>(blocks_for(positions, block_size_));
  if (table->size() <= keep) return;
  std::vector<int> tail(table->begin() + static_cast<std::ptrdiff_t>(keep), table->end());
  table->resize(keep);
  release(&tail);
}

void BlockAllocator::release(std::vector<int>* table) {
  for (auto it = table->rbegin(); it != table->rend(); ++it) {
    Block& k = blocks_[*it];
    LLAMA2_CHECK(k.refs > 0);
    if (--k.refs > 0) continue;
    --used_;
    if (k.cached) {
      lru_push_back(*it);
    } else {
      free_.push_back(*it);
    }
  }
  LLAMA2_CHECK(used_ >= 0);
  table->clear();
}

}  // namespace llama2
