// Helpers of the constraint-engine tests (test_constrain_*.cpp): compiling specs, matching whole
// texts, and an independent reference recognizer.
//
// EarleyReference is the tests' oracle for masks: a textbook Earley recognizer over the Grammar
// (rules, alternatives, byte classes) that shares nothing with the engine's Program, stacks,
// tables or tries. A token is allowed iff the text so far plus its bytes is a viable prefix (the
// Earley chart after it is non-empty: every rule is productive, so every live item can finish).
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "coordinator/constrain/constraint.h"
#include "coordinator/constrain/matcher.h"
#include "coordinator/text/tokenizer.h"

namespace llama2::test {

namespace cst = llama2::constrain;

inline std::shared_ptr<const cst::TokenVocabulary> vocab_of(const std::string& model_dir) {
  const Tokenizer tok(std::string(LLAMA2_SOURCE_DIR) + "/" + model_dir + "/tokenizer.model");
  return cst::TokenVocabulary::from_tokenizer(tok);
}

inline std::shared_ptr<const cst::TokenVocabulary> tiny_vocab() {
  static const auto v = vocab_of("tests/models/tiny-gqa");
  return v;
}

inline std::shared_ptr<const cst::TokenVocabulary> docs_vocab() {
  static const auto v = vocab_of("models/docs-8m");
  return v;
}

inline cst::ConstraintSpec spec(cst::ConstraintKind kind, std::string text) {
  cst::ConstraintSpec s;
  s.kind = kind;
  s.text = std::move(text);
  return s;
}
inline cst::ConstraintSpec schema(std::string text) {
  return spec(cst::ConstraintKind::kJsonSchema, std::move(text));
}
inline cst::ConstraintSpec regex(std::string text) {
  return spec(cst::ConstraintKind::kRegex, std::move(text));
}
inline cst::ConstraintSpec gbnf(std::string text) {
  return spec(cst::ConstraintKind::kGbnf, std::move(text));
}

inline std::shared_ptr<const cst::CompiledGrammar> compile(const cst::ConstraintSpec& s) {
  return cst::compile_constraint(s, tiny_vocab());
}

// Whether `text` is a complete sentence of the grammar (through the engine's parser).
inline bool full_match(const std::shared_ptr<const cst::CompiledGrammar>& g,
                       const std::string& text) {
  cst::GrammarMatcher m(g);
  if (text.empty()) return m.is_accepting();
  return m.accept_bytes(text) && m.is_accepting();
}
inline bool full_match(const cst::ConstraintSpec& s, const std::string& text) {
  return full_match(compile(s), text);
}
// Whether `text` can still be extended to a sentence.
inline bool viable(const std::shared_ptr<const cst::CompiledGrammar>& g, const std::string& text) {
  cst::GrammarMatcher m(g);
  return text.empty() || m.accept_bytes(text);
}

inline bool bit(const std::vector<uint32_t>& words, int id) {
  return (words[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u;
}

class EarleyReference {
 public:
  explicit EarleyReference(const cst::Grammar& g) : g_(g) {
    nullable_.assign(g.rules().size(), false);
    for (bool changed = true; changed;) {  // plain fixpoint: the tests' grammars are small
      changed = false;
      for (size_t r = 0; r < g.rules().size(); ++r) {
        if (nullable_[r]) continue;
        for (const auto& alt : g.rules()[r].alts) {
          bool all = true;
          for (const auto& s : alt)
            all = all && s.kind == cst::Symbol::Kind::kRule && nullable_[s.index];
          if (all) {
            nullable_[r] = changed = true;
            break;
          }
        }
      }
    }
    chart_.emplace_back();
    for (uint32_t a = 0; a < g.rules()[g.root()].alts.size(); ++a) add(0, {g.root(), a, 0, 0});
    close(0);
  }

  size_t length() const { return chart_.size() - 1; }
  // Feeds bytes; false (and the chart left as it was) when they are not a viable continuation.
  bool push(const std::string& bytes) {
    const size_t start = chart_.size();
    for (char c : bytes) {
      scan(static_cast<uint8_t>(c));
      if (chart_.back().empty()) {
        chart_.resize(start);
        seen_.resize(start);
        return false;
      }
    }
    return true;
  }
  void pop_to(size_t len) {
    chart_.resize(len + 1);
    seen_.resize(len + 1);
  }
  bool complete() const {
    for (const Item& it : chart_.back()) {
      const auto& alt = g_.rules()[it.rule].alts[it.alt];
      if (it.rule == g_.root() && it.origin == 0 && it.dot == alt.size()) return true;
    }
    return false;
  }

 private:
  struct Item {
    uint32_t rule, alt, dot, origin;
    bool operator<(const Item& o) const {
      return std::tie(rule, alt, dot, origin) < std::tie(o.rule, o.alt, o.dot, o.origin);
    }
  };

  void add(size_t i, const Item& it) {
    if (seen_.size() <= i) seen_.resize(i + 1);
    if (seen_[i].insert(it).second) chart_[i].push_back(it);
  }

  void close(size_t i) {
    for (size_t k = 0; k < chart_[i].size(); ++k) {
      const Item it = chart_[i][k];
      const auto& alt = g_.rules()[it.rule].alts[it.alt];
      if (it.dot == alt.size()) {  // complete: advance the items waiting on this rule
        for (size_t w = 0; w < chart_[it.origin].size(); ++w) {
          const Item p = chart_[it.origin][w];
          const auto& palt = g_.rules()[p.rule].alts[p.alt];
          if (p.dot < palt.size() && palt[p.dot].kind == cst::Symbol::Kind::kRule &&
              palt[p.dot].index == it.rule) {
            add(i, {p.rule, p.alt, p.dot + 1, p.origin});
          }
        }
        continue;
      }
      const auto& s = alt[it.dot];
      if (s.kind != cst::Symbol::Kind::kRule) continue;
      for (uint32_t a = 0; a < g_.rules()[s.index].alts.size(); ++a)
        add(i, {s.index, a, 0, static_cast<uint32_t>(i)});
      if (nullable_[s.index]) add(i, {it.rule, it.alt, it.dot + 1, it.origin});
    }
  }

  void scan(uint8_t b) {
    const size_t i = chart_.size() - 1;
    chart_.emplace_back();
    seen_.emplace_back();
    for (const Item& it : chart_[i]) {
      const auto& alt = g_.rules()[it.rule].alts[it.alt];
      if (it.dot < alt.size() && alt[it.dot].kind == cst::Symbol::Kind::kBytes &&
          g_.byte_sets()[alt[it.dot].index].has(b)) {
        add(i + 1, {it.rule, it.alt, it.dot + 1, it.origin});
      }
    }
    close(i + 1);
  }

  const cst::Grammar& g_;
  std::vector<bool> nullable_;
  std::vector<std::vector<Item>> chart_;
  std::vector<std::set<Item>> seen_;
};

}  // namespace llama2::test
