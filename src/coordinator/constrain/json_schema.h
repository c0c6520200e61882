// JSON Schema compiled into the grammar form: the output is valid JSON that validates against
// the schema (docs/structured-output.md, "JSON Schema" lists the keywords and the few places
// where the engine produces a subset of the valid documents: a fixed property order, no extra
// properties beside declared ones, no exponent in bounded numbers).
#pragma once

#include <string>

#include "coordinator/constrain/json_grammar.h"

namespace llama2::constrain {

struct JsonSchemaOptions {
  JsonWhitespace whitespace = JsonWhitespace::kSingleSpace;
};

// Compiles `schema_text` (a JSON Schema document) and sets the grammar's root. Throws
// ConstraintError naming the keyword or location at fault, or the limit passed.
void compile_json_schema(Grammar& grammar, const std::string& schema_text,
                         const JsonSchemaOptions& options);

// {"type": "json_object"}: any JSON object.
void compile_json_object(Grammar& grammar, const JsonSchemaOptions& options);

}  // namespace llama2::constrain
