#include "coordinator/constrain/json_grammar.h"

#include "coordinator/constrain/number_range.h"

namespace llama2::constrain {

Symbol JsonGrammar::ws() {
  if (!have_ws_) {
    ws_ = ws_mode_ == JsonWhitespace::kNone ? g_.group({}) : g_.optional(g_.byte(' '));
    have_ws_ = true;
  }
  return ws_;
}

Symbol JsonGrammar::string_char() {
  if (have_char_) return char_;
  CodepointSet plain;  // U+0020 and up, minus '"' and '\'
  plain.add(0x20, '"' - 1);
  plain.add('"' + 1, '\\' - 1);
  plain.add('\\' + 1, CodepointSet::kMax);
  ByteSet simple, hex_no_d, d, low;
  for (char c : std::string("\"\\/bfnrt")) simple.add(static_cast<uint8_t>(c));
  hex_no_d.add_range('0', '9');
  hex_no_d.add_range('a', 'c');
  hex_no_d.add_range('e', 'f');
  hex_no_d.add_range('A', 'C');
  hex_no_d.add_range('E', 'F');
  ByteSet hex = hex_no_d;
  d.add('d');
  d.add('D');
  hex.add('d');
  hex.add('D');
  low.add_range('0', '7');
  const Symbol h = g_.bytes(hex);
  // \uXXXX: any 4 hex digits except D800-DFFF (a lone surrogate is not a character).
  const Symbol u4 = g_.choice({{g_.bytes(hex_no_d), h, h, h}, {g_.bytes(d), g_.bytes(low), h, h}});
  const Symbol escape =
      g_.group({g_.byte('\\'), g_.choice({{g_.bytes(simple)}, {g_.byte('u'), u4}})});
  char_ = g_.choice({{g_.codepoints(plain)}, {escape}});
  have_char_ = true;
  return char_;
}

Symbol JsonGrammar::string(int min, int max) {
  const Symbol body =
      min == 0 && max < 0 ? g_.star(string_char()) : g_.repeat(string_char(), min, max);
  return g_.group({g_.byte('"'), body, g_.byte('"')});
}

Symbol JsonGrammar::literal(const std::string& text) {
  return g_.group(g_.literal(text));
}

Symbol JsonGrammar::object(Symbol members, bool may_be_empty) {
  std::vector<Sequence> alts{{g_.byte('{'), ws(), members, ws(), g_.byte('}')}};
  if (may_be_empty) alts.push_back({g_.byte('{'), ws(), g_.byte('}')});
  return g_.choice(std::move(alts));
}

Symbol JsonGrammar::member(Symbol key, Symbol value) {
  return g_.group({key, g_.byte(':'), ws(), value});
}

void JsonGrammar::make_any() {
  const uint32_t value = g_.add_rule("json value");
  const uint32_t obj = g_.add_rule("json object");
  const uint32_t arr = g_.add_rule("json array");
  value_ = Grammar::ref(value);
  object_ = Grammar::ref(obj);
  have_any_ = true;
  const Symbol comma = g_.group({g_.byte(','), ws()});
  const Symbol mem = member(string(0, -1), value_);
  const Symbol members = g_.group({mem, g_.star(g_.group({comma, mem}))});
  g_.set_alternatives(
      obj, {{g_.byte('{'), ws(), members, ws(), g_.byte('}')}, {g_.byte('{'), ws(), g_.byte('}')}});
  const Symbol items = g_.group({value_, g_.star(g_.group({comma, value_}))});
  g_.set_alternatives(
      arr, {{g_.byte('['), ws(), items, ws(), g_.byte(']')}, {g_.byte('['), ws(), g_.byte(']')}});
  g_.set_alternatives(value, {{object_},
                              {Grammar::ref(arr)},
                              {string(0, -1)},
                              {number_in_range(g_, std::nullopt, std::nullopt)},
                              {literal("true")},
                              {literal("false")},
                              {literal("null")}});
}

Symbol JsonGrammar::any_value() {
  if (!have_any_) make_any();
  return value_;
}

Symbol JsonGrammar::any_object() {
  if (!have_any_) make_any();
  return object_;
}

}  // namespace llama2::constrain
