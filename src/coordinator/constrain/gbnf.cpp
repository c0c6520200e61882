#include "coordinator/constrain/gbnf.h"

#include <map>
#include <string>

namespace llama2::constrain {
namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

class GbnfParser {
 public:
  GbnfParser(Grammar& g, std::string_view text) : g_(g), t_(text) {}

  void parse() {
    skip_space();
    while (!eof()) {
      const size_t at = i_;
      const std::string name = rule_name();
      skip_space();
      if (t_.substr(i_, 3) != "::=") fail("expected '::=' after rule name '" + name + "'");
      i_ += 3;
      const uint32_t id = rule_id(name);
      if (g_.rules()[id].defined) {
        i_ = at;
        fail("rule '" + name + "' is defined twice");
      }
      std::vector<Sequence> alts = alternatives(0);
      g_.set_alternatives(id, std::move(alts));
      skip_space();
    }
    finish();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    size_t line = 1;
    for (size_t k = 0; k < i_ && k < t_.size(); ++k) line += t_[k] == '\n';
    throw ConstraintError("grammar: " + what + " (line " + std::to_string(line) + ")");
  }

  bool eof() const { return i_ >= t_.size(); }
  char peek() const { return eof() ? '\0' : t_[i_]; }

  void skip_space() {
    while (!eof()) {
      const char c = t_[i_];
      if (c == '#') {
        while (!eof() && t_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++i_;
      } else {
        break;
      }
    }
  }

  std::string rule_name() {
    const size_t start = i_;
    while (!eof() && is_name_char(t_[i_])) ++i_;
    if (i_ == start) fail(std::string("expected a rule name, found '") + peek() + "'");
    return std::string(t_.substr(start, i_ - start));
  }

  uint32_t rule_id(const std::string& name) {
    auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const uint32_t id = g_.add_rule(name);
    ids_.emplace(name, id);
    used_at_.emplace(name, i_);
    return id;
  }

  // At a rule boundary: the next thing is `name ::=` (or the end of the text).
  bool at_rule_start() {
    if (eof()) return true;
    size_t j = i_;
    while (j < t_.size() && is_name_char(t_[j])) ++j;
    if (j == i_) return false;
    while (j < t_.size() && (t_[j] == ' ' || t_[j] == '\t')) ++j;
    return t_.substr(j, 3) == "::=";
  }

  std::vector<Sequence> alternatives(int depth) {
    if (depth > g_.limits().max_nesting) {
      fail("parentheses nest deeper than " + std::to_string(g_.limits().max_nesting) +
           " (limit max_nesting)");
    }
    std::vector<Sequence> alts{sequence(depth)};
    while (peek() == '|') {
      ++i_;
      alts.push_back(sequence(depth));
    }
    return alts;
  }

  Sequence sequence(int depth) {
    Sequence seq;
    while (true) {
      skip_space();
      if (eof() || peek() == '|' || peek() == ')') break;
      if (depth == 0 && at_rule_start()) break;
      Symbol s = element(depth);
      skip_space_inline();
      seq.push_back(repetition(s));
    }
    return seq;
  }

  void skip_space_inline() {
    while (!eof() && (peek() == ' ' || peek() == '\t')) ++i_;
  }

  Symbol repetition(Symbol s) {
    while (true) {
      const char c = peek();
      if (c == '*') {
        ++i_;
        s = g_.star(s);
      } else if (c == '+') {
        ++i_;
        s = g_.plus(s);
      } else if (c == '?') {
        ++i_;
        s = g_.optional(s);
      } else if (c == '{') {
        ++i_;
        int min = number(0), max;
        if (peek() == ',') {
          ++i_;
          max = peek() == '}' ? -1 : number(-1);
        } else {
          max = min;
        }
        if (peek() != '}') fail("expected '}' to close a repetition");
        ++i_;
        s = g_.repeat(s, min, max);
      } else {
        return s;
      }
      skip_space_inline();
    }
  }

  int number(int none) {
    skip_space_inline();
    if (peek() < '0' || peek() > '9') return none;
    long v = 0;
    while (peek() >= '0' && peek() <= '9') {
      v = v * 10 + (t_[i_++] - '0');
      if (v > 1'000'000) fail("repetition count too large");
    }
    skip_space_inline();
    return static_cast<int>(v);
  }

  Symbol element(int depth) {
    const char c = peek();
    if (c == '"') {
      ++i_;
      std::string bytes;
      while (peek() != '"') {
        if (eof() || peek() == '\n') fail("unterminated string literal");
        bytes += utf8_encode(character());
      }
      ++i_;
      return g_.group(g_.literal(bytes));
    }
    if (c == '[') {
      ++i_;
      return g_.codepoints(char_class());
    }
    if (c == '.') {
      ++i_;
      CodepointSet all;
      all.add(0, CodepointSet::kMax);
      return g_.codepoints(all);
    }
    if (c == '(') {
      ++i_;
      std::vector<Sequence> alts = alternatives(depth + 1);
      skip_space();
      if (peek() != ')') fail("expected ')'");
      ++i_;
      return g_.choice(std::move(alts));
    }
    if (is_name_char(c)) {
      const std::string name = rule_name();
      return Grammar::ref(rule_id(name));
    }
    fail(std::string("unexpected character '") + c + "'");
  }

  CodepointSet char_class() {  // after '['
    CodepointSet set;
    const bool negate = peek() == '^';
    if (negate) ++i_;
    while (peek() != ']') {
      if (eof()) fail("unterminated character class");
      const uint32_t lo = character();
      uint32_t hi = lo;
      if (peek() == '-' && i_ + 1 < t_.size() && t_[i_ + 1] != ']') {
        ++i_;
        hi = character();
        if (hi < lo) fail("character range out of order");
      }
      set.add(lo, hi);
    }
    ++i_;
    return negate ? set.negated() : set;
  }

  uint32_t hex(size_t digits) {
    uint32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      const char c = peek();
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail("bad hex digit in escape");
      ++i_;
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  uint32_t character() {  // one (possibly escaped) character of a literal or class
    if (peek() == '\\') {
      ++i_;
      const char c = peek();
      ++i_;
      switch (c) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case '\\':
          return '\\';
        case '"':
          return '"';
        case '[':
          return '[';
        case ']':
          return ']';
        case '-':
          return '-';
        case '^':
          return '^';
        case 'x':
          return hex(2);
        case 'u':
          return checked(hex(4));
        case 'U':
          return checked(hex(8));
        default:
          fail(std::string("unknown escape '\\") + c + "'");
      }
    }
    const auto b0 = static_cast<unsigned char>(peek());
    const int len = b0 < 0x80         ? 1
                    : (b0 >> 5) == 6  ? 2
                    : (b0 >> 4) == 14 ? 3
                    : (b0 >> 3) == 30 ? 4
                                      : 0;
    if (len == 0 || i_ + static_cast<size_t>(len) > t_.size()) fail("invalid UTF-8");
    uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(t_[i_ + static_cast<size_t>(k)]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    i_ += static_cast<size_t>(len);
    return checked(cp);
  }

  uint32_t checked(uint32_t cp) {
    if (cp > CodepointSet::kMax || (cp >= 0xD800 && cp <= 0xDFFF)) {
      fail("character U+" + std::to_string(cp) + " is not a Unicode scalar value");
    }
    return cp;
  }

  void finish() {
    auto root = ids_.find("root");
    if (root == ids_.end() || !g_.rules()[root->second].defined) {
      i_ = t_.size();
      fail("no 'root' rule (the start rule must be called root)");
    }
    for (const auto& [name, id] : ids_) {
      if (!g_.rules()[id].defined) {
        i_ = used_at_[name];
        fail("rule '" + name + "' is used but never defined");
      }
    }
    g_.set_root(root->second);
    const std::vector<bool> live = reachable_rules(g_);
    for (const auto& [name, id] : ids_) {
      if (!live[id]) {
        i_ = t_.size();
        fail("rule '" + name + "' is never used (not reachable from root)");
      }
    }
  }

  Grammar& g_;
  std::string_view t_;
  size_t i_ = 0;
  std::map<std::string, uint32_t> ids_;
  std::map<std::string, size_t> used_at_;
};

}  // namespace

void compile_gbnf(Grammar& grammar, std::string_view text) {
  GbnfParser parser(grammar, text);
  parser.parse();
}

}  // namespace llama2::constrain
