// A request's constraint on its output (constrained decoding, docs/structured-output.md): the
// protocol fields that ask for one, the typed spec they become, and its compilation on rank 0.
//
// The socket protocol and `batch` lines carry at most one of (docs/PROTOCOL.md):
//   "response_format": {"type": "text"} | {"type": "json_object"} |
//                      {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}
//   "regex": "..."            the whole output matches the regular expression
//   "choice": ["a", "b"]      the output is exactly one of the strings
//   "grammar": "root ::= ..." a GBNF grammar (llama.cpp's syntax)
// The HTTP front maps OpenAI's, vLLM's and llama.cpp's fields onto these
// (http/structured_fields.h).
#pragma once

#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "coordinator/constrain/constraint.h"
#include "coordinator/requests/codes.h"

namespace llama2 {

class Tokenizer;

// What a request asked for and, once compiled, the grammar every step's mask comes from. Shared
// (immutable after compilation) by the request's copies: the owner's queue, the scheduler.
struct RequestConstraint {
  constrain::ConstraintSpec spec;
  std::string field;  // the protocol field it came from ("response_format", "regex", ...)
  // Null until ConstraintCompiler::compile (on a remote replica: until its leader compiles it).
  std::shared_ptr<const constrain::CompiledGrammar> grammar;
};

// The protocol keys above.
extern const std::set<std::string> kConstraintKeys;

// The tool-call constraint (request_tools.h) has no protocol field of its own (the request's
// `tools` make it); between processes (the replica wire) its spec travels under this key, which
// no request may use (it is not among kRequestKeys).
constexpr const char* kToolGrammarWireKey = "tool_call_grammar";

// The constraint the request object `obj` asks for; null when none (or "response_format" of type
// "text"). Throws llama2::Error naming the key and the expected shape when malformed or when two
// keys ask for constraints. Compilation errors come later, from ConstraintCompiler.
std::shared_ptr<RequestConstraint> parse_constraint_fields(const nlohmann::json& obj);

// The same fields written back (the inverse of parse_constraint_fields; for the replica wire and
// the tests).
void constraint_to_json(const RequestConstraint& c, nlohmann::json* obj);

// Compiles constraints over one tokenizer's vocabulary, through a bounded LRU of compiled grammars
// (constrain::GrammarCache) keyed by the spec's text: every call of the same tool compiles once.
// The vocabulary is built on the first constrained request, so a server that never sees one pays
// nothing at start-up. Thread-safe: the endpoints' threads compile at admission.
class ConstraintCompiler {
 public:
  explicit ConstraintCompiler(const Tokenizer& tok, size_t capacity = 256);
  // Sets c.grammar; nullopt on success, else invalid_request with the compiler's message (which
  // names the keyword, rule or limit), prefixed by the field.
  std::optional<Refusal> compile(RequestConstraint& c);
  constrain::GrammarCache& cache();

 private:
  const Tokenizer& tok_;
  size_t capacity_;
  std::once_flag once_;
  std::unique_ptr<constrain::GrammarCache> cache_;
};

}  // namespace llama2
