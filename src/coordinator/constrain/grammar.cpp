#include "coordinator/constrain/grammar.h"

#include <algorithm>

namespace llama2::constrain {
namespace {

// Appends to `out` the UTF-8 encodings of [lo, hi] as byte-range sequences (each sequence a
// list of per-byte [lo, hi] ranges): the range is split at encoding-length boundaries, around
// the surrogates, and wherever a continuation byte would not span its full 80..BF range.
void utf8_sequences(uint32_t lo, uint32_t hi,
                    std::vector<std::vector<std::pair<uint8_t, uint8_t>>>& out) {
  std::vector<std::pair<uint32_t, uint32_t>> todo{{lo, hi}};
  while (!todo.empty()) {
    auto [s, e] = todo.back();
    todo.pop_back();
    if (s > e) continue;
    if (s <= 0xDFFF && e >= 0xD800) {  // surrogates are not scalar values
      if (s < 0xD800) todo.push_back({s, 0xD7FF});
      if (e > 0xDFFF) todo.push_back({0xE000, e});
      continue;
    }
    bool split = false;
    for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
      if (s <= max && e > max) {
        todo.push_back({max + 1, e});
        todo.push_back({s, max});
        split = true;
        break;
      }
    }
    if (split) continue;
    const size_t n = utf8_encode(s).size();
    for (size_t i = 1; i < n && !split; ++i) {
      const uint32_t m = (1u << (6 * i)) - 1;
      if ((s & ~m) == (e & ~m)) continue;
      if ((s & m) != 0) {
        todo.push_back({(s | m) + 1, e});
        todo.push_back({s, s | m});
        split = true;
      } else if ((e & m) != m) {
        todo.push_back({e & ~m, e});
        todo.push_back({s, (e & ~m) - 1});
        split = true;
      }
    }
    if (split) continue;
    const std::string a = utf8_encode(s), b = utf8_encode(e);
    std::vector<std::pair<uint8_t, uint8_t>> seq;
    for (size_t k = 0; k < n; ++k)
      seq.push_back({static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k])});
    out.push_back(std::move(seq));
  }
}

}  // namespace

std::string utf8_encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

void CodepointSet::add(uint32_t lo, uint32_t hi) {
  if (lo > hi) std::swap(lo, hi);
  hi = std::min(hi, kMax);
  if (lo > kMax) return;
  ranges_.push_back({lo, hi});
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (const auto& r : ranges_) {
    if (!merged.empty() && r.first <= merged.back().second + 1) {
      merged.back().second = std::max(merged.back().second, r.second);
    } else {
      merged.push_back(r);
    }
  }
  ranges_ = std::move(merged);
}

void CodepointSet::add(const CodepointSet& other) {
  for (const auto& r : other.ranges_) add(r.first, r.second);
}

CodepointSet CodepointSet::negated() const {
  CodepointSet out;
  uint32_t next = 0;
  for (const auto& r : ranges_) {
    if (r.first > next) out.ranges_.push_back({next, r.first - 1});
    next = r.second + 1;
  }
  if (next <= kMax) out.ranges_.push_back({next, kMax});
  return out;
}

bool CodepointSet::contains(uint32_t cp) const {
  for (const auto& r : ranges_)
    if (cp >= r.first && cp <= r.second) return true;
  return false;
}

void Grammar::count_symbols(const std::vector<Sequence>& alts) {
  for (const auto& alt : alts) symbols_ += alt.size() + 1;
  if (symbols_ > limits_.max_grammar_symbols) {
    throw ConstraintError("the constraint compiles to more than " +
                          std::to_string(limits_.max_grammar_symbols) +
                          " grammar symbols (limit max_grammar_symbols)");
  }
}

uint32_t Grammar::add_rule(std::string name) {
  if (rules_.size() >= limits_.max_rules) {
    throw ConstraintError("the constraint compiles to more than " +
                          std::to_string(limits_.max_rules) + " grammar rules (limit max_rules)");
  }
  rules_.push_back({std::move(name), {}, false});
  return static_cast<uint32_t>(rules_.size() - 1);
}

void Grammar::set_alternatives(uint32_t rule, std::vector<Sequence> alts) {
  count_symbols(alts);
  rules_.at(rule).alts = std::move(alts);
  rules_[rule].defined = true;
}

uint32_t Grammar::intern(const std::string& name, std::vector<Sequence> alts) {
  auto it = interned_.find(alts);
  if (it != interned_.end()) return it->second;
  const uint32_t id = add_rule(name);
  interned_.emplace(alts, id);
  set_alternatives(id, std::move(alts));
  return id;
}

Symbol Grammar::bytes(const ByteSet& set) {
  auto it = set_ids_.find(set);
  if (it != set_ids_.end()) return {Symbol::Kind::kBytes, it->second};
  sets_.push_back(set);
  const auto id = static_cast<uint32_t>(sets_.size() - 1);
  set_ids_.emplace(set, id);
  return {Symbol::Kind::kBytes, id};
}

Symbol Grammar::byte(uint8_t b) {
  ByteSet s;
  s.add(b);
  return bytes(s);
}

Sequence Grammar::literal(std::string_view text) {
  Sequence seq;
  for (char c : text) seq.push_back(byte(static_cast<uint8_t>(c)));
  return seq;
}

Symbol Grammar::codepoints(const CodepointSet& set) {
  std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
  for (const auto& r : set.ranges()) utf8_sequences(r.first, r.second, seqs);
  ByteSet ascii;
  std::vector<Sequence> alts;
  for (const auto& seq : seqs) {
    if (seq.size() == 1) {
      ascii.add_range(seq[0].first, seq[0].second);
      continue;
    }
    Sequence alt;
    for (const auto& [lo, hi] : seq) {
      ByteSet b;
      b.add_range(lo, hi);
      alt.push_back(bytes(b));
    }
    alts.push_back(std::move(alt));
  }
  if (alts.empty()) return bytes(ascii);  // ASCII only (or empty: matches nothing)
  if (!ascii.empty()) alts.insert(alts.begin(), Sequence{bytes(ascii)});
  return ref(intern("char", std::move(alts)));
}

Symbol Grammar::star(Symbol item) {
  const std::pair<int, std::vector<int64_t>> key{1, {int(item.kind), item.index}};
  auto it = helpers_.find(key);
  if (it != helpers_.end()) return it->second;
  const uint32_t r = add_rule("repeat");
  set_alternatives(r, {{item, ref(r)}, {}});
  return helpers_[key] = ref(r);
}

Symbol Grammar::plus(Symbol item) {
  return group({item, star(item)});
}

Symbol Grammar::optional(Symbol item) {
  return choice({{item}, {}});
}

Symbol Grammar::repeat(Symbol item, int min, int max) {
  if (min < 0 || (max >= 0 && max < min)) {
    throw ConstraintError("repetition {" + std::to_string(min) + "," + std::to_string(max) +
                          "} has its bounds reversed");
  }
  if (min > limits_.max_repeat || max > limits_.max_repeat) {
    throw ConstraintError("repetition count " + std::to_string(std::max(min, max)) +
                          " is above the limit of " + std::to_string(limits_.max_repeat) +
                          " (limit max_repeat)");
  }
  const std::pair<int, std::vector<int64_t>> key{2, {int(item.kind), item.index, min, max}};
  auto it = helpers_.find(key);
  if (it != helpers_.end()) return it->second;
  Symbol tail;
  if (max < 0) {
    tail = star(item);
  } else {
    // up_to(k) ::= item up_to(k-1) | "" : at most k more, without growing the parser stack.
    tail = group({});
    RepeatChain chain{item, {}};
    for (int k = 1; k <= max - min; ++k) {
      tail = choice({{item, tail}, {}});
      chain.rules.push_back(tail.index);
    }
    chains_.push_back(std::move(chain));
  }
  Sequence seq(static_cast<size_t>(min), item);
  seq.push_back(tail);
  return helpers_[key] = group(std::move(seq));
}

Symbol Grammar::group(Sequence seq) {
  if (seq.size() == 1) return seq[0];
  return ref(intern("group", {std::move(seq)}));
}

Symbol Grammar::choice(std::vector<Sequence> alts) {
  if (alts.size() == 1 && alts[0].size() == 1) return alts[0][0];
  return ref(intern("choice", std::move(alts)));
}

Symbol Grammar::nothing() {
  return bytes(ByteSet{});
}

}  // namespace llama2::constrain
