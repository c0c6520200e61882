// Which fields of an OpenAI request body the HTTP front reads, which it ignores and which it
// refuses (docs/serving.md, "Tolerance"). Real clients send bookkeeping fields (`store`,
// `metadata`, `service_tier`, `user`, ...) and vLLM's extensions; refusing them broke those
// clients, so a field the server does not read is ignored and named once in the log. A field that
// would change the output if honoured (tools, structured output, sampling extensions not
// implemented yet) is still refused by name: ignoring it would return a different answer than the
// client asked for. That list is one table (api_fields.cpp, kRefused), so that implementing a
// field is deleting its row.
#pragma once

#include <cstddef>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace llama2 {

// The sampling keys OpenAI/vLLM bodies and the socket protocol spell alike: copied as they are.
extern const std::vector<std::string> kSameNameKeys;

enum class ApiKind { kCompletion, kChat };

// What the front does with one top-level key of a body.
enum class FieldUse {
  kRead,     // a parameter this server implements (or `user`-like keys strict mode accepts)
  kRefused,  // in the refusal table: its value is checked by refused_field
  kIgnored,  // anything else: ignored (logged once), or 400 under --strict-api
};
FieldUse field_use(const std::string& key, ApiKind kind);

// True for the keys the server took before tolerance existed (strict mode accepts exactly
// these): the read ones and today's refusable ones (`n`, `tools`, ...).
bool strict_api_key(const std::string& key, ApiKind kind);
// Those keys, sorted and comma-separated (strict mode's message).
std::string strict_api_keys(ApiKind kind);

// A refused field: the key and the message's subject, e.g. "\"tools\" (tool calls)".
struct RefusedField {
  std::string param;
  std::string what;
};
// The first field of `body` (an object) that would change the output if honoured and is given
// with a value other than its harmless one (null is never refused: OpenAI clients send null for
// "not given"); nullopt when there is none.
std::optional<RefusedField> refused_field(const nlohmann::json& body);

// The keys of `body` the front ignores (FieldUse::kIgnored), in the body's order.
std::vector<std::string> ignored_fields(const nlohmann::json& body, ApiKind kind);

// Says on stderr, once per process per field name, that a field is ignored: a client that sends
// `store` on every request gets one line, not one per request. Thread-safe. At most kMaxNames
// names are remembered (then one line says that further names are not logged), so that bodies
// with made-up keys cannot grow it or the log without bound.
class IgnoredFieldLog {
 public:
  static constexpr size_t kMaxNames = 256;
  explicit IgnoredFieldLog(std::ostream& out = std::cerr) : out_(out) {}
  // The names of `keys` not logged before, now logged (returned for tests); `request_id`: the
  // request that carried them (X-Request-Id, already checked: no escaping needed), "" none.
  std::vector<std::string> note(const std::vector<std::string>& keys,
                                const std::string& request_id = "");

 private:
  std::ostream& out_;
  std::mutex mu_;
  std::set<std::string> seen_;
  bool full_ = false;
};

}  // namespace llama2
