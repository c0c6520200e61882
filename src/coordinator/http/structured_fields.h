// The HTTP front's structured-output fields (docs/structured-output.md, "HTTP"): what OpenAI,
// vLLM and llama.cpp clients send to constrain the output, translated into the project's one
// set of constraint keys (request_constraint.h), which parse_request_fields then checks like the
// socket's and batch's:
//   OpenAI     "response_format": {"type": "json_object"} | {"type": "json_schema",
//              "json_schema": {"name", "schema", "strict"}} | {"type": "text"}
//   vLLM       "guided_json" (a schema object or its JSON text), "guided_regex", "guided_choice",
//              "guided_grammar" (GBNF), "guided_decoding_backend" (ignored: one engine), and
//              "structured_outputs": {"json" | "regex" | "choice" | "grammar" | "json_object"}
//   llama.cpp  "grammar" (GBNF), "json_schema" (a schema object)
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "coordinator/http/openai_api.h"

namespace llama2 {

// The body keys above (both endpoints, /v1/completions and /v1/chat/completions).
extern const std::set<std::string> kStructuredKeys;

// Writes the constraint `body` asks for into `mine` (the project's request object); nullopt when
// it asks for none or the fields translate. An invalid_request error naming the client's key when
// one is malformed or when two of them ask for constraints.
std::optional<ApiError> translate_structured_fields(const nlohmann::json& body,
                                                    nlohmann::json* mine);

}  // namespace llama2
