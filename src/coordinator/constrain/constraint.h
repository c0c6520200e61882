// The front door of the constraint engine: what a request asks for (ConstraintSpec), compiled
// into a shareable CompiledGrammar, and a bounded LRU cache of compiled grammars keyed by the
// request's text, so repeated schemas (every call of the same tool) compile once.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/constrain/compiled_grammar.h"
#include "coordinator/constrain/json_schema.h"

namespace llama2::constrain {

enum class ConstraintKind : uint8_t {
  kJsonSchema,  // text: a JSON Schema document
  kJsonObject,  // any JSON object ({"type": "json_object"}); text unused
  kRegex,       // text: a regular expression (regex.h), matched in full
  kChoice,      // choices: the output is exactly one of them
  kGbnf,        // text: a GBNF grammar (gbnf.h)
  kToolCalls,   // text: the tools and the mode (tool_grammar.h)
};

struct ConstraintSpec {
  ConstraintKind kind = ConstraintKind::kJsonSchema;
  std::string text;
  std::vector<std::string> choices;
  JsonWhitespace whitespace = JsonWhitespace::kSingleSpace;
};

// The constraint as a checked Grammar. Throws ConstraintError (a 400 for the caller).
Grammar build_grammar(const ConstraintSpec& spec, const ConstraintLimits& limits);

std::shared_ptr<const CompiledGrammar> compile_constraint(
    const ConstraintSpec& spec, std::shared_ptr<const TokenVocabulary> vocab,
    const ConstraintLimits& limits = ConstraintLimits());

// Compiled grammars by their spec, least recently used dropped beyond `capacity`. A failed
// compilation is not cached. Thread-safe; two threads missing on the same spec both compile.
class GrammarCache {
 public:
  GrammarCache(std::shared_ptr<const TokenVocabulary> vocab, size_t capacity,
               const ConstraintLimits& limits = ConstraintLimits());
  std::shared_ptr<const CompiledGrammar> get(const ConstraintSpec& spec);
  size_t size() const;
  uint64_t hits() const;
  uint64_t misses() const;

 private:
  using Entry = std::pair<std::string, std::shared_ptr<const CompiledGrammar>>;
  std::shared_ptr<const TokenVocabulary> vocab_;
  size_t capacity_;
  ConstraintLimits limits_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recent first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  uint64_t hits_ = 0, misses_ = 0;
};

}  // namespace llama2::constrain
