// Rank 0's bookkeeping of the paged KV cache: which blocks are free and which belong to which
// sequence. The block ids it hands out travel to every rank inside the step plan.
//
// Prefix caching: a full block whose KV has been computed can be registered under the hash of its
// whole token prefix (a chain: hash(hash of the previous block, this block's tokens), started from
// a per-allocator salt: one allocator serves one engine, i.e. one model and one KV dtype). A later
// sequence whose prompt starts with the same tokens shares those blocks by reference count and
// computes only the rest. A registered block whose last user ended stays cached (evictable); it is
// taken back, least recently used first, only when no unregistered free block is left. Writes never
// go into a shared block: only full blocks are registered, and a sequence never reuses the block
// holding its last prompt token, so everything it writes lands in blocks of its own.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace llama2 {

// A sequence's place in the hash chain: its first `blocks` full blocks are hashed (registered, or
// found already registered) and `hash` is the last one's. Starts empty; allocate() fills it.
struct PrefixChain {
  int blocks = 0;
  uint64_t hash = 0;  // with blocks == 0: the allocator's salt
};

// Monotonic counters since start (the prefix cache's hit rate is hit_tokens / queried_tokens).
struct PrefixCacheCounters {
  int64_t queried_tokens = 0;  // prompt tokens of sequences admitted with prefix caching
  int64_t hit_tokens = 0;      // of those, tokens whose KV was found cached (not computed)
  int64_t evicted_blocks = 0;  // cached blocks taken back for other use
};

class BlockAllocator {
 public:
  // `salt` starts every hash chain (0: a random one per allocator).
  BlockAllocator(int num_blocks, int block_size, uint64_t salt = 0);

  int block_size() const { return block_size_; }
  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  // Blocks a new reservation can take now: unregistered free ones plus evictable cached ones.
  int free_blocks() const { return static_cast<int>(free_.size()) + evictable_; }
  // Blocks held by at least one sequence (a block shared by several counts once).
  int used_blocks() const { return used_; }
  // Registered blocks, in use or evictable.
  int cached_blocks() const { return static_cast<int>(by_hash_.size()); }
  int evictable_blocks() const { return evictable_; }
  const PrefixCacheCounters& counters() const { return counters_; }
  static int blocks_for(int positions, int block_size) {
    return (positions + block_size - 1) / block_size;
  }

  // Grows `table` so it covers `positions` tokens with blocks of its own (no sharing); false
  // (table unchanged) if blocks ran out.
  bool ensure(std::vector<int>* table, int positions);
  // A sequence's reservation (admission, or resumption after a preemption): an empty `table`
  // becomes blocks covering `positions` tokens, the first of them, when `use_cache`, the longest
  // chain of cached full blocks of `prompt` (its known tokens; never the block holding the last
  // one). Returns the number of tokens those blocks already hold (a multiple of block_size,
  // < prompt.size()) and sets `chain` past them; nullopt (nothing changed) if the blocks it would
  // still need exceed free_blocks() less the evictable ones it hits less `spare` (blocks kept for
  // running sequences). `count`: a prompt lookup for the prefix cache's counters (not a
  // resumption's).
  std::optional<int> allocate(const std::vector<int>& prompt, int positions, bool use_cache,
                              std::vector<int>* table, PrefixChain* chain, int spare = 0,
                              bool count = true);
  // After the KV of tokens[0, in_cache) has been computed into `table`: registers every full block
  // past `chain` (a block whose prefix is already registered elsewhere stays private) and advances
  // `chain`. tokens: [>= in_cache].
  void cache_full_blocks(const std::vector<int>& tokens, int in_cache,
                         const std::vector<int>& table, PrefixChain* chain);
  // Gives back the blocks of `table` past those covering `positions` tokens (a speculative
  // verify step's rejected tokens), as release() does.
  void truncate(std::vector<int>* table, int positions);
  // Drops the sequence's reference to every block of `table` and clears it. A block nobody holds
  // any more becomes free, or evictable when it is registered (the table's last blocks are then
  // the first to go: an earlier block of a chain stays findable as long as possible).
  void release(std::vector<int>* table);

 private:
  struct Block {
    int refs = 0;
    bool cached = false;  // registered in by_hash_ under `hash`
    uint64_t hash = 0;
    int prev = -1, next = -1;  // LRU links, while cached with refs == 0
  };
  uint64_t chain_hash(uint64_t prev, const int* tokens) const;
  bool holds(int block, const int* tokens) const;
  int take();  // a free block, else the least recently used evictable one; refs = 1
  void lru_push_back(int b);
  void lru_unlink(int b);

  int block_size_;
  uint64_t salt_;
  int used_ = 0, evictable_ = 0;
  std::vector<Block> blocks_;
  std::vector<int> free_;  // unregistered, unused; LIFO: recently freed blocks are reused first
  int lru_head_ = -1, lru_tail_ = -1;  // evictable blocks, least recently used first
  std::unordered_map<uint64_t, int> by_hash_;
  // [num_blocks, block_size]: the tokens of each registered block, compared on every hit. With
  // them and a chain step that is a bijection of the previous hash, a hit can be wrong only if two
  // different earlier prefixes collide in 64 bits (~n^2 / 2^64 for n cached blocks; the random
  // salt keeps a client from aiming at one).
  std::vector<int> tokens_;
  PrefixCacheCounters counters_;
};

}  // namespace llama2
