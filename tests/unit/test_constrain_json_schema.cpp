// JSON Schema compiled by the constraint engine: documents accepted and refused, numeric ranges
// checked value by value against exact arithmetic, the keywords of OpenAI's strict mode and of
// Pydantic / Jackson / Spring AI output, whitespace, and the refusals that name the keyword.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "constrain_test_util.h"
#include "test_util.h"

namespace llama2::test {
namespace {

std::string schema_error(const std::string& text) {
  return error_of([&] { compile(schema(text)); });
}

// Integer bounds: every n in [-300, 300] matches iff it is within them.
void check_integer_range(const std::string& keywords, long lo, long hi) {
  const auto g = compile(schema(R"({"type":"integer",)" + keywords + "}"));
  for (long n = -300; n <= 300; ++n) {
    CAPTURE(keywords);
    CAPTURE(n);
    CHECK(full_match(g, std::to_string(n)) == (n >= lo && n <= hi));
  }
}

}  // namespace

TEST_CASE("constrain json schema: integer bounds, inclusive, exclusive, fractional, both drafts") {
  check_integer_range(R"("minimum":-17,"maximum":123)", -17, 123);
  check_integer_range(R"("exclusiveMinimum":-17,"exclusiveMaximum":123)", -16, 122);
  check_integer_range(R"("minimum":2.5,"maximum":99.9)", 3, 99);
  check_integer_range(R"("minimum":-2.5,"maximum":-0.5)", -2, -1);
  check_integer_range(R"("minimum":0)", 0, 1000);
  check_integer_range(R"("maximum":-10)", -1000, -10);
  check_integer_range(R"("minimum":5,"exclusiveMinimum":true,"maximum":9)", 6, 9);  // draft 4
  check_integer_range(R"("minimum":0,"maximum":0)", 0, 0);
  check_integer_range(R"("exclusiveMaximum":0,"minimum":-1)", -1, -1);
  const auto g = compile(schema(R"({"type":"integer"})"));
  CHECK(full_match(g, "123456789012345678901234567890"));
  CHECK_FALSE(full_match(g, "01"));
  CHECK_FALSE(full_match(g, "1.0"));
  CHECK(full_match(g, "-0"));  // zero's other JSON spelling, where negatives are allowed
  CHECK(full_match(schema(R"({"type":"integer","minimum":-3,"maximum":0})"), "-0"));
  CHECK_FALSE(full_match(schema(R"({"type":"integer","minimum":0})"), "-0"));
  CHECK_FALSE(full_match(schema(R"({"type":"integer","maximum":-1})"), "-0"));
  CHECK_FALSE(full_match(g, "-01"));
  CHECK(contains(schema_error(R"({"type":"integer","minimum":5,"maximum":4})"),
                 "no number satisfies"));
}

TEST_CASE("constrain json schema: number bounds against exact decimal comparison") {
  struct Case {
    const char* keywords;
    long lo, hi;  // in hundredths
    bool lo_excl, hi_excl;
  };
  const Case cases[] = {
      {R"("minimum":0,"maximum":1)", 0, 100, false, false},
      {R"("exclusiveMinimum":-1.5,"exclusiveMaximum":2.25)", -150, 225, true, true},
      {R"("minimum":0.05,"maximum":0.3)", 5, 30, false, false},
      {R"("minimum":-2.3,"exclusiveMaximum":-0.7)", -230, -70, false, true},
      {R"("exclusiveMinimum":1.5,"maximum":1.75)", 150, 175, true, false}};
  for (const Case& c : cases) {
    const auto g = compile(schema(std::string(R"({"type":"number",)") + c.keywords + "}"));
    for (long v = -400; v <= 400; ++v) {
      const long a = v < 0 ? -v : v;
      const std::string sign = v < 0 ? "-" : "";
      const std::string ip = std::to_string(a / 100);
      char frac[8];
      std::snprintf(frac, sizeof frac, "%02ld", a % 100);
      const bool in = (c.lo_excl ? v > c.lo : v >= c.lo) && (c.hi_excl ? v < c.hi : v <= c.hi);
      for (const std::string& text : {sign + ip + "." + frac, sign + ip + "." + frac + "0"}) {
        CAPTURE(c.keywords);
        CAPTURE(text);
        CHECK(full_match(g, text) == in);
      }
      if (a % 100 == 0 && v != 0) {
        CAPTURE(c.keywords);
        CHECK(full_match(g, sign + ip) == in);
      }
    }
  }
  const auto any = compile(schema(R"({"type":"number"})"));
  for (const char* ok : {"0", "-0.5", "1e5", "2.5E-3", "-12.0e+7"}) CHECK(full_match(any, ok));
  for (const char* bad : {"01", ".5", "1.", "+1", "1e", "--1"}) CHECK_FALSE(full_match(any, bad));
  CHECK(contains(schema_error(R"({"type":"number","exclusiveMinimum":1,"maximum":1})"),
                 "no number satisfies"));
}

TEST_CASE("constrain json schema: objects as OpenAI strict mode and Pydantic write them") {
  // Pydantic v2: $defs, $ref, anyOf with null for Optional, title/description/default.
  const std::string pydantic = R"({
    "$defs": {"Item": {"properties": {"sku": {"title": "Sku", "type": "string", "maxLength": 4},
                                      "qty": {"title": "Qty", "type": "integer", "minimum": 1}},
                       "required": ["sku", "qty"], "title": "Item", "type": "object"}},
    "properties": {"items": {"items": {"$ref": "#/$defs/Item"}, "title": "Items", "type": "array",
                             "minItems": 1, "maxItems": 2},
                   "note": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": null}},
    "required": ["items"], "title": "Order", "type": "object"})";
  const auto g = compile(schema(pydantic));
  CHECK(full_match(g, R"({"items":[{"sku":"ab","qty":3}]})"));
  CHECK(full_match(
      g, R"({ "items": [ {"sku": "abcd", "qty": 12}, {"sku": "", "qty": 1} ], "note": null })"));
  CHECK(full_match(g, R"({"items":[{"sku":"a\"\u00e9","qty":3}],"note":"x"})"));
  CHECK_FALSE(full_match(g, R"({"items":[]})"));                                 // minItems
  CHECK_FALSE(full_match(g, R"({"items":[{"sku":"abcde","qty":3}]})"));          // maxLength
  CHECK_FALSE(full_match(g, R"({"items":[{"qty":3,"sku":"a"}]})"));              // order fixed
  CHECK_FALSE(full_match(g, R"({"items":[{"sku":"a","qty":0}]})"));              // minimum
  CHECK_FALSE(full_match(g, R"({"note":null,"items":[{"sku":"a","qty":1}]})"));  // order
  CHECK_FALSE(full_match(g, R"({"items":[{"sku":"a","qty":1}],"extra":1})"));    // no extras
  CHECK_FALSE(full_match(g, R"({"items":  [{"sku":"a","qty":1}]})"));            // 2 spaces
  CHECK_FALSE(full_match(g, R"( {"items":[{"sku":"a","qty":1}]})"));             // leading ws
  CHECK_FALSE(full_match(g, R"({"items":[{"sku":"a","qty":1}]}
)"));
  // Strict mode: every property required, additionalProperties false, type arrays for null.
  const auto strict = compile(schema(R"({"type":"object","additionalProperties":false,
     "properties":{"city":{"type":"string"},"unit":{"type":["string","null"],"enum":["c","f",null]}},
     "required":["city","unit"]})"));
  CHECK(full_match(strict, R"({"city":"Oslo","unit":null})"));
  CHECK(full_match(strict, R"({"city":"Oslo","unit":"c"})"));
  CHECK_FALSE(full_match(strict, R"({"city":"Oslo","unit":"k"})"));
  CHECK_FALSE(full_match(strict, R"({"city":"Oslo"})"));
}

TEST_CASE("constrain json schema: recursion, maps, tuples, const, enum, boolean schemas") {
  const auto tree = compile(schema(R"({"$ref":"#/definitions/node","definitions":{"node":{
      "type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/definitions/node"}}},"required":["v"]}}})"));
  CHECK(full_match(tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  CHECK_FALSE(full_match(tree, R"({"v":1,"kids":[{}]})"));
  const auto self = compile(schema(R"({"type":"object","properties":{"next":{"$ref":"#"}}})"));
  CHECK(full_match(self, R"({"next":{"next":{}}})"));
  const auto map =
      compile(schema(R"({"type":"object","additionalProperties":{"type":"boolean"}})"));
  CHECK(full_match(map, R"({"a":true, "b c":false})"));
  CHECK(full_match(map, "{}"));
  CHECK_FALSE(full_match(map, R"({"a":1})"));
  const auto tuple = compile(schema(R"({"type":"array","prefixItems":[{"type":"string"},
      {"type":"integer"}],"items":false,"minItems":1})"));
  CHECK(full_match(tuple, R"(["a",1])"));
  CHECK(full_match(tuple, R"(["a"])"));
  CHECK_FALSE(full_match(tuple, R"(["a",1,2])"));
  CHECK_FALSE(full_match(tuple, "[]"));
  const auto c = compile(schema(R"({"const":{"k":[1,"two",null]}})"));
  CHECK(full_match(c, R"({"k":[1,"two",null]})"));
  const auto e = compile(schema(R"({"enum":["a",1,true,null,{"x":"y"},["é"]]})"));
  for (const char* ok : {"\"a\"", "1", "true", "null", R"({"x":"y"})", "[\"é\"]"})
    CHECK(full_match(e, ok));
  CHECK_FALSE(full_match(e, "\"b\""));
  const auto any = compile(schema("true"));
  CHECK(full_match(any, R"([1,{"a":[null,"x"]},-2.5e3,false])"));
  const auto anything = compile(schema("{}"));
  CHECK(full_match(anything, "\"s\""));
  const auto json_obj = compile(spec(cst::ConstraintKind::kJsonObject, ""));
  CHECK(full_match(json_obj, R"({"a": {"b": [1, 2]}})"));
  CHECK_FALSE(full_match(json_obj, "[1]"));
  const auto one_of =
      compile(schema(R"({"oneOf":[{"type":"object","properties":{"kind":{"const":"a"}},
      "required":["kind"]},{"type":"string","minLength":2}]})"));
  CHECK(full_match(one_of, R"({"kind":"a"})"));
  CHECK(full_match(one_of, R"("xy")"));
  const auto all_of = compile(schema(R"({"allOf":[{"type":"boolean"}],"description":"d"})"));
  CHECK(full_match(all_of, "false"));
}

TEST_CASE("constrain json schema: strings, lengths in characters, patterns as searches") {
  const auto len = compile(schema(R"({"type":"string","minLength":2,"maxLength":3})"));
  CHECK(full_match(len, R"("ab")"));
  CHECK(full_match(len, "\"\xC3\xA9\xE4\xB8\xAD\""));  // 2 characters, 5 bytes
  CHECK(full_match(len, R"("\n\u00e9x")"));            // escapes count as one character
  CHECK_FALSE(full_match(len, R"("a")"));
  CHECK_FALSE(full_match(len, R"("abcd")"));
  const auto any = compile(schema(R"({"type":"string","format":"email"})"));
  CHECK(full_match(any, R"("x\/y\t\"z\\")"));
  CHECK_FALSE(full_match(any, "\"a\nb\""));     // raw control character
  CHECK_FALSE(full_match(any, R"("\ud800")"));  // lone surrogate escape
  CHECK_FALSE(full_match(any, R"("\x")"));
  const auto search = compile(schema(R"({"type":"string","pattern":"b+c"})"));
  CHECK(full_match(search, R"("abbcd")"));
  CHECK_FALSE(full_match(search, R"("abd")"));
  const auto anchored = compile(schema(R"({"type":"string","pattern":"^[a-z]{2}-\\d+$"})"));
  CHECK(full_match(anchored, R"("ab-12")"));
  CHECK_FALSE(full_match(anchored, R"("xab-12")"));
  const auto quote = compile(schema(R"({"type":"string","pattern":"^a\"b$"})"));
  CHECK(full_match(quote, R"("a\"b")"));  // the regex's '"' is written escaped in JSON
}

TEST_CASE("constrain json schema: whitespace is bounded, or none") {
  const std::string s =
      R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}}}})";
  const auto spaced = compile(schema(s));
  CHECK(full_match(spaced, R"({ "a": [ 1, 2 ] })"));
  CHECK(full_match(spaced, R"({"a":[1,2]})"));
  CHECK_FALSE(full_match(spaced, R"({"a" :[1]})"));
  CHECK_FALSE(full_match(spaced, R"({"a":[1 ,2]})"));
  CHECK_FALSE(full_match(spaced, "{\n\"a\":[1]}"));
  cst::ConstraintSpec tight = schema(s);
  tight.whitespace = cst::JsonWhitespace::kNone;
  const auto compact = compile(tight);
  CHECK(full_match(compact, R"({"a":[1,2]})"));
  CHECK_FALSE(full_match(compact, R"({"a": [1,2]})"));
}

TEST_CASE("constrain json schema: keywords that change validity are refused by name") {
  for (const char* k :
       {R"("not":{})", R"("if":{})", R"("patternProperties":{})", R"("minProperties":1)",
        R"("multipleOf":2)", R"("uniqueItems":true)", R"("dependentRequired":{})",
        R"("contains":{})", R"("propertyNames":{})", R"("unevaluatedProperties":false)"}) {
    const std::string keyword = std::string(k).substr(1, std::string(k).find('"', 1) - 1);
    CAPTURE(keyword);
    CHECK(contains(schema_error(std::string("{") + k + "}"),
                   "keyword '" + keyword + "' is not supported"));
  }
  CHECK(contains(schema_error(R"({"allOf":[{},{}]})"), "'allOf' is supported with exactly one"));
  CHECK(contains(schema_error(R"({"$ref":"#/$defs/x","type":"string","$defs":{"x":{}}})"),
                 "'$ref' together with 'type'"));
  CHECK(contains(schema_error(R"({"$ref":"other.json#/x"})"), "only local references"));
  CHECK(contains(schema_error(R"({"$ref":"#/$defs/missing"})"), "$ref points to nothing"));
  CHECK(contains(schema_error(R"({"type":"strin"})"), "unknown type \"strin\""));
  CHECK(contains(schema_error(R"({"type":"string","pattern":"a","maxLength":3})"),
                 "'pattern' together with"));
  CHECK(contains(schema_error(R"({"type":"string","pattern":"(a"})"), "regex: missing ')'"));
  CHECK(contains(schema_error("{"), "not valid JSON"));
  CHECK(contains(schema_error("false"), "allows no value"));
  CHECK(contains(
      schema_error(
          R"({"$defs":{"a":{"$ref":"#/$defs/b"},"b":{"$ref":"#/$defs/a"}},"$ref":"#/$defs/a"})"),
      "matches no finite text"));
  CHECK(contains(
      schema_error(R"({"type":"object","properties":{"me":{"$ref":"#"}},"required":["me"]})"),
      "matches no finite text"));
  // Annotations and unknown keywords do not change validity: accepted.
  CHECK(full_match(schema(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","title":"t",
      "description":"d","default":1,"examples":[1],"format":"int32","x-vendor":true,"type":"integer"})"),
                   "7"));
}

}  // namespace llama2::test

namespace llama2::test {

TEST_CASE("constrain json schema: invalid UTF-8 and JSON pointers with escapes") {
  CHECK(contains(schema_error("{\"type\":\"s\xD3\xD3tring\"}"), "not valid UTF-8"));
  cst::ConstraintSpec c;
  c.kind = cst::ConstraintKind::kChoice;
  c.choices = {"ok", "\xFF"};
  CHECK(contains(error_of([&] { compile(c); }), "not valid UTF-8"));
  CHECK(full_match(
      schema(R"({"$ref":"#/$defs/a~1b/items/0","$defs":{"a/b":{"items":[{"const":3}]}}})"), "3"));
  CHECK(contains(schema_error(R"({"$ref":"#/$defs/a/items/7","$defs":{"a":{"items":[1]}}})"),
                 "points to nothing"));
}

}  // namespace llama2::test
