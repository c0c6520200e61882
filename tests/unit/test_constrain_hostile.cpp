// Hostile constraints (issue 36, "Bounded on hostile input"): each gets a clear error naming the
// limit, or compiles and matches with bounded parser state. No timing assertions: the bounds
// checked are the counts the limits are about (stacks per step, grammar size).
#include <doctest/doctest.h>

#include <string>

#include "constrain_test_util.h"
#include "test_util.h"

namespace llama2::test {

TEST_CASE("constrain hostile: 10,000 $defs chained by $ref compile without deep recursion") {
  std::string defs;
  for (int i = 0; i < 10000; ++i) {
    defs += "\"d" + std::to_string(i) + "\":{\"$ref\":\"#/$defs/d" + std::to_string(i + 1) + "\"},";
  }
  defs += R"("d10000":{"type":"integer","minimum":0,"maximum":9})";
  const auto g = compile(schema(R"({"$ref":"#/$defs/d0","$defs":{)" + defs + "}}"));
  CHECK(full_match(g, "7"));
  CHECK_FALSE(full_match(g, "10"));
  // The same chain through required object properties: output nesting grows, the compile
  // does not recurse.
  std::string nested;
  for (int i = 0; i < 10000; ++i) {
    nested += "\"n" + std::to_string(i) +
              R"(":{"type":"object","properties":{"x":{"$ref":"#/$defs/n)" + std::to_string(i + 1) +
              "\"}}},";
  }
  nested += R"("n10000":{"type":"null"})";
  const auto h = compile(schema(R"({"$ref":"#/$defs/n0","$defs":{)" + nested + "}}"));
  CHECK(full_match(h, R"({"x":{"x":{}}})"));
}

TEST_CASE("constrain hostile: a 10,000-deep schema is refused naming max_nesting") {
  std::string deep;
  for (int i = 0; i < 10000; ++i) deep += R"({"type":"object","properties":{"a":)";
  deep += "{}";
  for (int i = 0; i < 10000; ++i) deep += "}}";
  const std::string err = error_of([&] { compile(schema(deep)); });
  CHECK(contains(err, "limit max_nesting"));
  // Just inside the limit compiles.
  std::string ok;
  for (int i = 0; i < 60; ++i) ok += R"({"type":"array","items":)";
  ok += R"({"type":"null"})";
  for (int i = 0; i < 60; ++i) ok += "}";
  CHECK(full_match(schema(ok), std::string(60, '[') + std::string(60, ']')));
}

TEST_CASE("constrain hostile: an enum of 100,000 strings keeps one trie node's stacks per step") {
  std::string values;
  for (int i = 0; i < 100000; ++i) values += (i ? ",\"v" : "\"v") + std::to_string(i * 7919) + "\"";
  const auto g = compile(schema("{\"enum\":[" + values + "]}"));
  CHECK(full_match(g, "\"v7919\""));
  CHECK(full_match(g, "\"v" + std::to_string(99999 * 7919) + "\""));
  CHECK_FALSE(full_match(g, "\"v7918\""));
  cst::GrammarMatcher m(g);
  for (char c : std::string("\"v79")) {
    REQUIRE(m.accept_bytes(std::string(1, c)));
    CHECK(m.stack_count() <= 11);  // the alternatives of one trie node: a digit or the quote
  }
  std::vector<uint32_t> mask(static_cast<size_t>(m.mask_words()));
  m.fill_mask(mask.data());
}

TEST_CASE("constrain hostile: catastrophic regexes keep a bounded number of stacks") {
  for (const std::string p : {"(a*)*b", "(a|aa)*c", "(a|a?)+b", "(a?){30}a{30}", "((a+)+)+x"}) {
    CAPTURE(p);
    const auto g = compile(regex(p));
    cst::GrammarMatcher m(g);
    size_t most = 0;
    for (int i = 0; i < 10000; ++i) {
      if (!m.accept_bytes("a")) break;
      most = std::max(most, m.stack_count());
    }
    CHECK(most <= 64);
    CHECK(m.is_accepting() == (p == "(a?){30}a{30}"));  // a{30..60}: the walk stops at 60
  }
}

TEST_CASE("constrain hostile: limits are named when passed") {
  cst::ConstraintLimits tight;
  tight.max_states_per_step = 3;
  const std::string states = error_of([&] {
    const auto g = cst::compile_constraint(regex("ab|ac|ad|ae"), tiny_vocab(), tight);
    cst::GrammarMatcher m(g);
  });
  CHECK(contains(states, "limit max_states_per_step"));
  CHECK(contains(error_of([&] { compile(regex("a{100000}")); }), "limit max_repeat"));
  cst::ConstraintLimits small;
  small.max_grammar_symbols = 1000;
  CHECK(contains(error_of([&] { cst::build_grammar(regex("[a-z]{2000}"), small); }),
                 "limit max_grammar_symbols"));
  small.max_text_bytes = 10;
  CHECK(contains(error_of([&] { cst::build_grammar(regex("abcdefghijk"), small); }),
                 "limit max_text_bytes"));
  CHECK(contains(
      error_of([&] { compile(regex(std::string(200, '(') + "a" + std::string(200, ')'))); }),
      "limit max_nesting"));
  CHECK(contains(error_of([&] {
                   compile(
                       gbnf("root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')')));
                 }),
                 "limit max_nesting"));
}

}  // namespace llama2::test
