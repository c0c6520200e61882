// The matcher's form of a Grammar and the parser that runs it.
//
// Program: the rules flattened into one array of elements; each alternative is a run of
// elements ending in kEnd, so a grammar position is one index ("pos").
//
// Parser: a set of stacks (a graph-structured stack). A stack is a chain of Frames in a
// StackPool; a frame is (pos, parent): where to continue, and the frame to return to when that
// alternative ends. Frames are hash-consed: equal stacks are one frame id, so a state is a small
// sorted vector of ids, states compare by value, and an ambiguous grammar ((a|aa)*, (a*)*) keeps a
// bounded number of stacks instead of one per parse. A call in tail position pushes no frame, so
// repetition (right recursion) does not grow the stacks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator/constrain/grammar.h"

namespace llama2::constrain {

struct Program {
  enum class Op : uint8_t { kBytes, kCall, kEnd };
  struct Elem {
    Op op;
    uint32_t arg;  // kBytes: index into sets; kCall: rule; kEnd: rule
  };
  std::vector<Elem> elems;
  std::vector<ByteSet> sets;
  std::vector<uint32_t> alts_begin;  // [rules + 1] ranges of alt_starts per rule
  std::vector<uint32_t> alt_starts;  // element index where each alternative starts
  std::vector<std::string> rule_names;
  uint32_t root = 0;

  // Runs check(grammar) first: throws ConstraintError for a grammar the parser cannot run.
  static Program build(const Grammar& grammar);
  bool matches(uint32_t pos, uint8_t byte) const { return sets[elems[pos].arg].has(byte); }
};

// Parent of a bottom frame: the grammar's root (the text is complete when it returns there) or an
// unknown context (token tables are computed for a position with the stack below it unknown).
constexpr int32_t kRootParent = -1;
constexpr int32_t kUnknownParent = -2;

struct Frame {
  uint32_t pos;
  int32_t parent;
};

// Hash-consed frames with undo: mark() and truncate(mark) drop every frame made since, so a mask
// computation or a rejected token leaves the pool as it was, and rollback is exact.
class StackPool {
 public:
  int32_t intern(uint32_t pos, int32_t parent);
  const Frame& operator[](int32_t id) const { return frames_[static_cast<size_t>(id)]; }
  size_t mark() const { return frames_.size(); }
  void truncate(size_t mark);
  void clear();

 private:
  size_t slot(uint32_t pos, int32_t parent) const;
  void grow();

  std::vector<Frame> frames_;
  std::vector<int32_t> table_;  // open addressing (linear probing) over frame ids, -1 empty
};

struct ParseState {
  std::vector<int32_t> tops;  // sorted frame ids; every top's pos is a kBytes element
  bool accepting = false;     // a path returned to the root: the text so far is complete
  bool popped = false;        // a path returned into kUnknownParent
  void clear() {
    tops.clear();
    accepting = popped = false;
  }
  bool operator==(const ParseState& o) const {
    return tops == o.tops && accepting == o.accepting && popped == o.popped;
  }
};

// Set of 64-bit keys cleared in O(1) (a generation stamp per slot).
class StampSet {
 public:
  bool insert(uint64_t key);  // false when already present
  void clear();
  size_t size() const { return count_; }

 private:
  void grow();
  std::vector<uint64_t> keys_;
  std::vector<uint32_t> stamps_;
  uint32_t gen_ = 1;
  size_t count_ = 0;
};

// The parser's operations. Holds scratch buffers, so one per thread (matchers own one each).
class Parser {
 public:
  Parser(const Program& program, const ConstraintLimits& limits)
      : program_(program), limits_(limits) {}
  // The state before any byte: the root's alternatives expanded.
  void initial(StackPool& pool, ParseState& out);
  // The state after `byte` from `in` (out must not alias in).
  void advance(StackPool& pool, const ParseState& in, uint8_t byte, ParseState& out);
  // The state after an alternative ended and returned into `frame` (>= 0) or the root.
  void resume(StackPool& pool, int32_t frame, ParseState& out);
  // The state of the single stack (pos, parent) before any byte (pos must be a kBytes element).
  void single(StackPool& pool, uint32_t pos, int32_t parent, ParseState& out);
  const Program& program() const { return program_; }

 private:
  void close(StackPool& pool, ParseState& out);

  const Program& program_;
  ConstraintLimits limits_;
  std::vector<std::pair<uint32_t, int32_t>> work_;
  StampSet visited_;
};

}  // namespace llama2::constrain
