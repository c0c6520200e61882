// Regular expressions, choices and GBNF grammars compiled by the constraint engine: languages
// against std::regex (ECMAScript) on every short string over a small alphabet, and the refusals
// named in docs/structured-output.md.
#include <doctest/doctest.h>

#include <regex>

#include "constrain_test_util.h"
#include "test_util.h"

namespace llama2::test {
namespace {

// Every string over `alphabet` of length <= max_len.
std::vector<std::string> all_strings(const std::string& alphabet, size_t max_len) {
  std::vector<std::string> out{""};
  for (size_t begin = 0, len = 0; len < max_len; ++len) {
    const size_t end = out.size();
    for (size_t i = begin; i < end; ++i)
      for (char c : alphabet) out.push_back(out[i] + c);
    begin = end;
  }
  return out;
}

std::string compile_error(const cst::ConstraintSpec& s) {
  return error_of([&] { compile(s); });
}

}  // namespace

TEST_CASE("constrain regex: full-match language equals std::regex on all short strings") {
  const std::vector<std::string> patterns = {
      "a*b",       "(ab|a)*c?",    "[a-c]{2,3}",     "x[^ab]y",         "\\d+(\\.\\d{1,2})?",
      "(a|b)+?c",  "a{0,2}b{1,}",  "[\\w.-]+@[a-c]", "(?:a|(?<n>bc))*", "a.c",
      "[^\\d]{2}", "\\.|a\\*",     "(a|aa)*c",       "(a*)*b",          "a{2}|b{,2}x",
      "[-a]c[a-]", "\\x61\\u0062", "1?2?3?",         "([ab][12]|c)+",   "^ab?$"};
  const auto strings = all_strings("abc12.x-@*", 4);
  for (const std::string& p : patterns) {
    CAPTURE(p);
    const auto g = compile(regex(p));
    // ECMAScript has no {,n}: give std::regex the {0,n} spelling.
    std::string ecma = p;
    for (size_t at; (at = ecma.find("{,")) != std::string::npos;) ecma.replace(at, 2, "{0,");
    if (ecma.find("(?<n>") != std::string::npos) ecma.replace(ecma.find("(?<n>"), 5, "(");
    const std::regex re(ecma, std::regex::ECMAScript);
    for (const std::string& s : strings) {
      CAPTURE(s);
      CHECK(full_match(g, s) == std::regex_match(s, re));
    }
  }
}

TEST_CASE("constrain regex: code points, classes and escapes") {
  CHECK(full_match(regex("[é-ë]+"), "éêë"));
  CHECK_FALSE(full_match(regex("[é-ë]+"), "e"));
  CHECK(full_match(regex("."), "中"));
  CHECK_FALSE(full_match(regex("."), "\n"));
  CHECK(full_match(regex("[^a]"), "\xF0\x9F\x98\x80"));         // U+1F600, four bytes
  CHECK_FALSE(viable(compile(regex("[^a]")), "\xED\xA0\x80"));  // a surrogate is never produced
  CHECK(full_match(regex("\\s\\S\\w\\W"), " xy!"));
  CHECK(full_match(regex("a\\u{1F600}"), "a\xF0\x9F\x98\x80"));
  CHECK(full_match(regex("[\\]\\\\-]+"), "]\\-"));
}

TEST_CASE("constrain regex: unsupported constructs are refused by name") {
  CHECK(contains(compile_error(regex("(a)\\1")), "backreferences"));
  CHECK(contains(compile_error(regex("(?<x>a)\\k<x>")), "backreferences"));
  CHECK(contains(compile_error(regex("a(?=b)")), "lookahead"));
  CHECK(contains(compile_error(regex("a(?!b)")), "lookahead"));
  CHECK(contains(compile_error(regex("(?<=a)b")), "lookbehind"));
  CHECK(contains(compile_error(regex("(?<!a)b")), "lookbehind"));
  CHECK(contains(compile_error(regex("(?>a)")), "atomic"));
  CHECK(contains(compile_error(regex("a*+")), "possessive"));
  CHECK(contains(compile_error(regex("\\bword")), "word boundaries"));
  CHECK(contains(compile_error(regex("(?i)a")), "inline flags"));
  CHECK(contains(compile_error(regex("\\p{L}")), "Unicode property"));
  CHECK(contains(compile_error(regex("a^b")), "'^'"));
  CHECK(contains(compile_error(regex("(ab")), "missing ')'"));
  CHECK(contains(compile_error(regex("ab)")), "unbalanced ')'"));
  CHECK(contains(compile_error(regex("*a")), "nothing to repeat"));
  CHECK(contains(compile_error(regex("[b-a]")), "out of order"));
  CHECK(contains(compile_error(regex("a{3,2}")), "reversed"));
}

TEST_CASE("constrain choice: exactly one of the strings") {
  cst::ConstraintSpec c;
  c.kind = cst::ConstraintKind::kChoice;
  c.choices = {"red", "green", "gr", "blue sky", ""};
  const auto g = compile(c);
  for (const char* s : {"red", "green", "gr", "blue sky", ""}) CHECK(full_match(g, s));
  for (const char* s : {"re", "gree", "greenx", "blue", "Red"}) CHECK_FALSE(full_match(g, s));
  c.choices.clear();
  CHECK(contains(compile_error(c), "at least one choice"));
}

TEST_CASE("constrain gbnf: llama.cpp syntax") {
  const auto g = compile(gbnf(R"G(# arithmetic, as in llama.cpp's examples
root  ::= (expr "=" ws term "\n")+
expr  ::= term ([-+*/] term)*
term  ::= ident | num | "(" ws expr ")" ws
ident ::= [a-z] [a-z0-9_]* ws
num   ::= [0-9]+ ws
ws    ::= [ \t\n]*
)G"));
  CHECK(full_match(g, "a+1=b\n"));
  CHECK(full_match(g, "(x*2)=y\nz=3\n"));
  CHECK_FALSE(full_match(g, "a+=b\n"));
  CHECK_FALSE(full_match(g, "A=b\n"));
  const auto h =
      compile(gbnf("root ::= \"\\x41\" [^\\n\"]{1,2} \"\\u00e9\" x?\nx ::= . | [\\[\\]]"));
  CHECK(full_match(h, "Ab\xC3\xA9"));
  CHECK(full_match(h,
                   "Abc\xC3\xA9"
                   "\xE4\xB8\xAD"));
  CHECK(full_match(h, "Abc\xC3\xA9]"));
  CHECK_FALSE(full_match(h, "A\"\xC3\xA9"));
  const auto k = compile(gbnf("root ::=\n  \"a\"\n  | \"b\" (\n \"c\"\n )\n"));
  CHECK(full_match(k, "a"));
  CHECK(full_match(k, "bc"));
}

TEST_CASE("constrain gbnf: undefined, unreachable, left-recursive and endless rules refused") {
  CHECK(contains(compile_error(gbnf("expr ::= \"a\"")), "no 'root' rule"));
  CHECK(contains(compile_error(gbnf("root ::= item\n")), "rule 'item' is used but never defined"));
  CHECK(contains(compile_error(gbnf("root ::= \"a\"\nextra ::= \"b\"")),
                 "rule 'extra' is never used"));
  CHECK(contains(compile_error(gbnf("root ::= root \"a\" | \"b\"")), "'root' is left-recursive"));
  CHECK(contains(
      compile_error(gbnf("root ::= a\na ::= b \"x\" | \"y\"\nb ::= c? a \"z\"\nc ::= \"c\"")),
      "left-recursive"));
  CHECK(contains(compile_error(gbnf("root ::= \"a\" root")), "matches no finite text"));
  CHECK(contains(compile_error(gbnf("root ::= \"a\"\nroot ::= \"b\"")), "defined twice"));
  CHECK(contains(compile_error(gbnf("root ::= \"a")), "unterminated string"));
  CHECK(contains(compile_error(gbnf("root ::= [a")), "unterminated character class"));
  CHECK(contains(compile_error(gbnf("root := \"a\"")), "expected '::='"));
  // Right recursion and nullable repetition are fine.
  CHECK(full_match(gbnf("root ::= \"a\" root | \"b\""), "aab"));
  CHECK(full_match(gbnf("root ::= (\"a\"*)* \"b\""), "aaab"));
}

}  // namespace llama2::test
