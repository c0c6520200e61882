#include "coordinator/constrain/program.h"

#include <algorithm>

namespace llama2::constrain {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t key_of(uint32_t pos, int32_t parent) {
  return (uint64_t{pos} << 32) | static_cast<uint32_t>(parent);
}

}  // namespace

Program Program::build(const Grammar& grammar) {
  check(grammar);
  Program p;
  p.sets = grammar.byte_sets();
  const auto& rules = grammar.rules();
  p.alts_begin.push_back(0);
  for (const Rule& rule : rules) {
    for (const Sequence& seq : rule.alts) {
      p.alt_starts.push_back(static_cast<uint32_t>(p.elems.size()));
      for (const Symbol& s : seq) {
        p.elems.push_back({s.kind == Symbol::Kind::kBytes ? Op::kBytes : Op::kCall, s.index});
      }
      p.elems.push_back({Op::kEnd, static_cast<uint32_t>(&rule - rules.data())});
    }
    p.alts_begin.push_back(static_cast<uint32_t>(p.alt_starts.size()));
    p.rule_names.push_back(rule.name);
  }
  p.root = grammar.root();
  return p;
}

size_t StackPool::slot(uint32_t pos, int32_t parent) const {
  return static_cast<size_t>(mix(key_of(pos, parent))) & (table_.size() - 1);
}

void StackPool::grow() {
  table_.assign(table_.empty() ? 1024 : table_.size() * 2, -1);
  // Reinserted in id order: the table is then what inserting in that order gives, which is what
  // truncate() relies on to undo insertions from the newest back.
  for (size_t id = 0; id < frames_.size(); ++id) {
    size_t s = slot(frames_[id].pos, frames_[id].parent);
    while (table_[s] >= 0) s = (s + 1) & (table_.size() - 1);
    table_[s] = static_cast<int32_t>(id);
  }
}

int32_t StackPool::intern(uint32_t pos, int32_t parent) {
  if ((frames_.size() + 1) * 2 > table_.size()) grow();
  size_t s = slot(pos, parent);
  while (table_[s] >= 0) {
    const Frame& f = frames_[static_cast<size_t>(table_[s])];
    if (f.pos == pos && f.parent == parent) return table_[s];
    s = (s + 1) & (table_.size() - 1);
  }
  table_[s] = static_cast<int32_t>(frames_.size());
  frames_.push_back({pos, parent});
  return table_[s];
}

void StackPool::truncate(size_t mark) {
  // Linear probing undoes exactly when the newest insertion is removed first: each one filled a
  // slot that was empty when it was made, and nothing older probed past it.
  while (frames_.size() > mark) {
    const auto id = static_cast<int32_t>(frames_.size() - 1);
    size_t s = slot(frames_.back().pos, frames_.back().parent);
    while (table_[s] != id) s = (s + 1) & (table_.size() - 1);
    table_[s] = -1;
    frames_.pop_back();
  }
}

void StackPool::clear() {
  frames_.clear();
  table_.clear();
}

void StampSet::grow() {
  std::vector<uint64_t> old_keys;
  std::vector<uint32_t> old_stamps;
  old_keys.swap(keys_);
  old_stamps.swap(stamps_);
  const size_t cap = old_keys.empty() ? 256 : old_keys.size() * 2;
  keys_.assign(cap, 0);
  stamps_.assign(cap, 0);
  const uint32_t gen = gen_;
  gen_ = 1;
  count_ = 0;
  for (size_t i = 0; i < old_keys.size(); ++i)
    if (old_stamps[i] == gen) insert(old_keys[i]);
}

void StampSet::clear() {
  count_ = 0;
  if (++gen_ == 0) {  // wrapped: old stamps could look current
    std::fill(stamps_.begin(), stamps_.end(), 0);
    gen_ = 1;
  }
}

bool StampSet::insert(uint64_t key) {
  if ((count_ + 1) * 2 > keys_.size()) grow();
  size_t s = static_cast<size_t>(mix(key)) & (keys_.size() - 1);
  while (stamps_[s] == gen_) {
    if (keys_[s] == key) return false;
    s = (s + 1) & (keys_.size() - 1);
  }
  stamps_[s] = gen_;
  keys_[s] = key;
  ++count_;
  return true;
}

void Parser::close(StackPool& pool, ParseState& out) {
  using Op = Program::Op;
  while (!work_.empty()) {
    const auto [pos, parent] = work_.back();
    work_.pop_back();
    if (!visited_.insert(key_of(pos, parent))) continue;
    if (visited_.size() > limits_.max_closure_steps) {
      throw ConstraintError("the grammar needs more than " +
                            std::to_string(limits_.max_closure_steps) +
                            " parser steps for one byte (limit max_closure_steps)");
    }
    const Program::Elem& e = program_.elems[pos];
    if (e.op == Op::kBytes) {
      out.tops.push_back(pool.intern(pos, parent));
    } else if (e.op == Op::kEnd) {
      if (parent == kRootParent) {
        out.accepting = true;
      } else if (parent == kUnknownParent) {
        out.popped = true;
      } else {
        const Frame& f = pool[parent];
        work_.push_back({f.pos, f.parent});
      }
    } else {
      const uint32_t next = pos + 1;
      const int32_t callee_parent =
          program_.elems[next].op == Op::kEnd ? parent : pool.intern(next, parent);
      for (uint32_t a = program_.alts_begin[e.arg]; a < program_.alts_begin[e.arg + 1]; ++a)
        work_.push_back({program_.alt_starts[a], callee_parent});
    }
  }
  std::sort(out.tops.begin(), out.tops.end());
  if (out.tops.size() > limits_.max_states_per_step) {
    throw ConstraintError("the grammar is too ambiguous: more than " +
                          std::to_string(limits_.max_states_per_step) +
                          " parser stacks after one byte (limit max_states_per_step)");
  }
}

void Parser::initial(StackPool& pool, ParseState& out) {
  out.clear();
  visited_.clear();
  const uint32_t r = program_.root;
  for (uint32_t a = program_.alts_begin[r]; a < program_.alts_begin[r + 1]; ++a)
    work_.push_back({program_.alt_starts[a], kRootParent});
  close(pool, out);
}

void Parser::advance(StackPool& pool, const ParseState& in, uint8_t byte, ParseState& out) {
  out.clear();
  visited_.clear();
  for (const int32_t top : in.tops) {
    const Frame f = pool[top];
    if (program_.matches(f.pos, byte)) work_.push_back({f.pos + 1, f.parent});
  }
  close(pool, out);
}

void Parser::resume(StackPool& pool, int32_t frame, ParseState& out) {
  out.clear();
  visited_.clear();
  if (frame == kRootParent) {
    out.accepting = true;
    return;
  }
  const Frame f = pool[frame];
  work_.push_back({f.pos, f.parent});
  close(pool, out);
}

void Parser::single(StackPool& pool, uint32_t pos, int32_t parent, ParseState& out) {
  out.clear();
  out.tops.push_back(pool.intern(pos, parent));
}

}  // namespace llama2::constrain
