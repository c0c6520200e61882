// The one grammar form every constraint compiles to: a context-free grammar over bytes whose
// terminals are byte classes (sets of bytes). Character classes over code points are expanded
// into their UTF-8 byte sequences here, so the matcher walks bytes only and multi-byte characters
// split across byte-fallback tokens need no special case. Repetition is expressed with helper
// rules (right recursion), so the matcher's stacks do not grow with the repeat count.
//
// Built by the compilers (json_schema.h, regex.h, gbnf.h, choice); checked by check() before it
// becomes a Program (program.h).
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "coordinator/constrain/limits.h"

namespace llama2::constrain {

// A set of bytes (256 bits).
struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1u; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  bool operator<(const ByteSet& o) const { return bits < o.bits; }
  bool operator==(const ByteSet& o) const { return bits == o.bits; }
};

// A set of Unicode scalar values as sorted, disjoint, non-adjacent ranges.
class CodepointSet {
 public:
  static constexpr uint32_t kMax = 0x10FFFF;
  void add(uint32_t lo, uint32_t hi);
  void add(const CodepointSet& other);
  // Everything in [0, kMax] not in this set (surrogates are dropped when expanded to UTF-8).
  CodepointSet negated() const;
  bool contains(uint32_t cp) const;
  bool empty() const { return ranges_.empty(); }
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

// One symbol of an alternative: a byte class or a reference to a rule.
struct Symbol {
  enum class Kind : uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  uint32_t index = 0;  // kBytes: index into Grammar::byte_sets(); kRule: rule id
  bool operator<(const Symbol& o) const { return kind != o.kind ? kind < o.kind : index < o.index; }
  bool operator==(const Symbol& o) const { return kind == o.kind && index == o.index; }
};

using Sequence = std::vector<Symbol>;

// The rules of a bounded repetition's tail, up_to(k) ::= item up_to(k-1) | "" for k = 1..n
// (rules[k-1]). Past the longest token, up_to(k) and up_to(k+1) look the same to every token,
// which lets CompiledGrammar share their token tables.
struct RepeatChain {
  Symbol item;
  std::vector<uint32_t> rules;
};

struct Rule {
  std::string name;  // for messages: a GBNF rule name or a schema location
  std::vector<Sequence> alts;
  bool defined = false;
};

class Grammar {
 public:
  explicit Grammar(const ConstraintLimits& limits) : limits_(limits) {}

  // A new rule without alternatives yet (define it later with set_alternatives).
  uint32_t add_rule(std::string name);
  void set_alternatives(uint32_t rule, std::vector<Sequence> alts);
  // A rule with these alternatives: an existing identical one when there is one, so equal
  // sub-grammars (every JSON string, every `{"type":"integer"}`) share rules and token tables.
  uint32_t intern(const std::string& name, std::vector<Sequence> alts);

  Symbol bytes(const ByteSet& set);
  Symbol byte(uint8_t b);
  static Symbol ref(uint32_t rule) { return {Symbol::Kind::kRule, rule}; }
  // The exact bytes of `text`, one class per byte.
  Sequence literal(std::string_view text);
  // One code point of `set`, as a rule over its UTF-8 encodings (surrogates excluded).
  Symbol codepoints(const CodepointSet& set);

  // Helper rules, memoized by their argument: X* (right recursive), X+, X?, X{min,max}
  // (max < 0: unbounded). `item` is one symbol; wrap sequences with group().
  Symbol star(Symbol item);
  Symbol plus(Symbol item);
  Symbol optional(Symbol item);
  Symbol repeat(Symbol item, int min, int max);
  Symbol group(Sequence seq);
  Symbol choice(std::vector<Sequence> alts);
  // Matches nothing (an empty byte class); compilers use it for "no value allowed".
  Symbol nothing();

  void set_root(uint32_t rule) { root_ = rule; }
  uint32_t root() const { return root_; }
  const std::vector<Rule>& rules() const { return rules_; }
  const std::vector<ByteSet>& byte_sets() const { return sets_; }
  size_t symbol_count() const { return symbols_; }
  const std::vector<RepeatChain>& repeat_chains() const { return chains_; }
  const ConstraintLimits& limits() const { return limits_; }

 private:
  void count_symbols(const std::vector<Sequence>& alts);

  ConstraintLimits limits_;
  std::vector<Rule> rules_;
  std::vector<ByteSet> sets_;
  std::map<ByteSet, uint32_t> set_ids_;
  std::map<std::vector<Sequence>, uint32_t> interned_;
  std::map<std::pair<int, std::vector<int64_t>>, Symbol> helpers_;
  std::vector<RepeatChain> chains_;
  size_t symbols_ = 0;
  uint32_t root_ = 0;
};

// Refuses, with ConstraintError naming the rule: an undefined rule, a rule no finite text
// matches (it would never let the model stop), and left recursion (a rule that can reach itself
// without consuming a byte and with something left to match after it, which would grow the
// parser stack forever). Rules not reachable from the root are ignored here (GBNF reports them).
void check(const Grammar& grammar);

// Rules that match the empty text, as a flag per rule.
std::vector<bool> nullable_rules(const Grammar& grammar);

// Rules reachable from the root, as a flag per rule.
std::vector<bool> reachable_rules(const Grammar& grammar);

// UTF-8 encoding of one code point (<= U+10FFFF).
std::string utf8_encode(uint32_t cp);

}  // namespace llama2::constrain
