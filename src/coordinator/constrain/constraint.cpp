#include "coordinator/constrain/constraint.h"

#include "coordinator/constrain/gbnf.h"
#include "coordinator/constrain/literal_trie.h"
#include "coordinator/constrain/regex.h"
#include "coordinator/constrain/tool_grammar.h"
#include "coordinator/text/tokenizer.h"

namespace llama2::constrain {
namespace {

// The cache key: every field of the spec, length-prefixed so no two specs collide.
std::string cache_key(const ConstraintSpec& spec) {
  std::string key;
  key += static_cast<char>(spec.kind);
  key += static_cast<char>(spec.whitespace);
  key += std::to_string(spec.text.size()) + ":" + spec.text;
  for (const std::string& c : spec.choices) key += std::to_string(c.size()) + ":" + c;
  return key;
}

size_t text_bytes(const ConstraintSpec& spec) {
  size_t n = spec.text.size();
  for (const std::string& c : spec.choices) n += c.size();
  return n;
}

}  // namespace

Grammar build_grammar(const ConstraintSpec& spec, const ConstraintLimits& limits) {
  if (text_bytes(spec) > limits.max_text_bytes) {
    throw ConstraintError("the constraint's text is longer than " +
                          std::to_string(limits.max_text_bytes) + " bytes (limit max_text_bytes)");
  }
  Grammar g(limits);
  switch (spec.kind) {
    case ConstraintKind::kJsonSchema:
      compile_json_schema(g, spec.text, JsonSchemaOptions{spec.whitespace});
      break;
    case ConstraintKind::kJsonObject:
      compile_json_object(g, JsonSchemaOptions{spec.whitespace});
      break;
    case ConstraintKind::kRegex:
      g.set_root(g.intern("root", {{compile_regex(g, spec.text, RegexMode::kFullMatch)}}));
      break;
    case ConstraintKind::kChoice:
      if (spec.choices.empty()) {
        throw ConstraintError("a choice constraint needs at least one choice");
      }
      for (const std::string& c : spec.choices) {
        if (!is_valid_utf8(c)) throw ConstraintError("a choice is not valid UTF-8");
      }
      g.set_root(g.intern("root", {{literal_trie(g, spec.choices, "choice")}}));
      break;
    case ConstraintKind::kGbnf:
      compile_gbnf(g, spec.text);
      break;
    case ConstraintKind::kToolCalls:
      compile_tool_calls(g, spec.text, JsonSchemaOptions{spec.whitespace});
      break;
  }
  check(g);
  return g;
}

std::shared_ptr<const CompiledGrammar> compile_constraint(
    const ConstraintSpec& spec, std::shared_ptr<const TokenVocabulary> vocab,
    const ConstraintLimits& limits) {
  const Grammar g = build_grammar(spec, limits);
  return std::make_shared<const CompiledGrammar>(g, std::move(vocab));
}

GrammarCache::GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity,
                           const ConstraintLimits& limits)
    : vocab_(std::move(vocab)), capacity_(capacity), limits_(limits) {}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(const ConstraintSpec& spec) {
  std::string key = cache_key(spec);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      ++hits_;
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->second;
    }
    ++misses_;
  }
  auto compiled = compile_constraint(spec, vocab_, limits_);  // outside the lock: may be slow
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->second;  // another thread won
  lru_.emplace_front(key, compiled);
  index_.emplace(std::move(key), lru_.begin());
  while (lru_.size() > capacity_) {
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
  return compiled;
}

size_t GrammarCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

uint64_t GrammarCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

uint64_t GrammarCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

}  // namespace llama2::constrain
