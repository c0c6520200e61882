#include "coordinator/constrain/literal_trie.h"

#include <algorithm>

namespace llama2::constrain {

Symbol literal_trie(Grammar& g, std::vector<std::string> texts, const std::string& name) {
  std::sort(texts.begin(), texts.end());
  texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
  // Nodes in preorder (sorted strings, each adding the nodes past its common prefix with the
  // one before), so every child comes after its parent.
  std::vector<uint8_t> byte{0};
  std::vector<uint32_t> parent{0};
  std::vector<uint8_t> terminal{0};
  std::vector<uint32_t> path{0};
  const std::string* prev = nullptr;
  for (const std::string& t : texts) {
    size_t common = 0;
    if (prev != nullptr)
      while (common < prev->size() && common < t.size() && (*prev)[common] == t[common]) ++common;
    path.resize(common + 1);
    for (size_t d = common; d < t.size(); ++d) {
      byte.push_back(static_cast<uint8_t>(t[d]));
      parent.push_back(path.back());
      terminal.push_back(0);
      path.push_back(static_cast<uint32_t>(byte.size() - 1));
    }
    terminal[path.back()] = 1;
    prev = &t;
  }
  const size_t n = byte.size();
  std::vector<uint32_t> kids_begin(n + 1, 0), kids;
  for (size_t i = 1; i < n; ++i) ++kids_begin[parent[i] + 1];
  for (size_t i = 0; i < n; ++i) kids_begin[i + 1] += kids_begin[i];
  kids.resize(n);
  std::vector<uint32_t> fill(kids_begin.begin(), kids_begin.end() - 1);
  for (size_t i = 1; i < n; ++i) kids[fill[parent[i]]++] = static_cast<uint32_t>(i);
  auto kid_count = [&](size_t i) { return kids_begin[i + 1] - kids_begin[i]; };
  // A node needs a rule when it branches or ends a string and continues; others are inlined.
  std::vector<Symbol> rule_of(n);
  for (size_t i = n; i-- > 0;) {
    const bool needs_rule = i == 0 || kid_count(i) > 1 || (terminal[i] && kid_count(i) > 0);
    if (!needs_rule) continue;
    std::vector<Sequence> alts;
    if (terminal[i]) alts.push_back({});
    for (uint32_t k = kids_begin[i]; k < kids_begin[i + 1]; ++k) {
      Sequence seq;
      uint32_t c = kids[k];
      seq.push_back(g.byte(byte[c]));
      while (kid_count(c) == 1 && !terminal[c]) {
        c = kids[kids_begin[c]];
        seq.push_back(g.byte(byte[c]));
      }
      if (kid_count(c) > 0) seq.push_back(rule_of[c]);
      alts.push_back(std::move(seq));
    }
    const uint32_t r = g.add_rule(name);
    g.set_alternatives(r, std::move(alts));
    rule_of[i] = Grammar::ref(r);
  }
  return rule_of[0];
}

}  // namespace llama2::constrain
