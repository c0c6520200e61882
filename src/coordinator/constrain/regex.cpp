#include "coordinator/constrain/regex.h"

#include <cstdio>
#include <string>

namespace llama2::constrain {
namespace {

CodepointSet range(uint32_t lo, uint32_t hi) {
  CodepointSet s;
  s.add(lo, hi);
  return s;
}

CodepointSet digits() {
  return range('0', '9');
}
CodepointSet word() {
  CodepointSet s = range('a', 'z');
  s.add('A', 'Z');
  s.add('0', '9');
  s.add('_', '_');
  return s;
}
CodepointSet space() {
  CodepointSet s = range('\t', '\r');  // \t \n \v \f \r
  s.add(' ', ' ');
  return s;
}

// The JSON spelling of a code point that must be escaped in a string ('"', '\\', < U+0020).
std::string json_escape(uint32_t cp) {
  switch (cp) {
    case '"':
      return "\\\"";
    case '\\':
      return "\\\\";
    case '\n':
      return "\\n";
    case '\r':
      return "\\r";
    case '\t':
      return "\\t";
    case '\b':
      return "\\b";
    case '\f':
      return "\\f";
    default: {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      return buf;
    }
  }
}

// The set a class escape letter stands for (\d \D \w \W \s \S); false for other letters.
bool class_escape(char c, CodepointSet& out) {
  switch (c) {
    case 'd':
      out = digits();
      return true;
    case 'D':
      out = digits().negated();
      return true;
    case 'w':
      out = word();
      return true;
    case 'W':
      out = word().negated();
      return true;
    case 's':
      out = space();
      return true;
    case 'S':
      out = space().negated();
      return true;
    default:
      return false;
  }
}

class RegexParser {
 public:
  RegexParser(Grammar& g, std::string_view p, RegexMode mode) : g_(g), p_(p), mode_(mode) {}

  Symbol parse() {
    bool anchored_start = false, anchored_end = false;
    if (!p_.empty() && p_.front() == '^') {
      anchored_start = true;
      p_.remove_prefix(1);
    }
    if (!p_.empty() && p_.back() == '$' && !escaped_at(p_.size() - 1)) {
      anchored_end = true;
      p_.remove_suffix(1);
    }
    Symbol body = alternation(0);
    if (i_ != p_.size()) fail("unbalanced ')'");
    if (mode_ == RegexMode::kFullMatch) return body;
    // ECMA-262 search: anything may surround the match unless anchored.
    const Symbol any_char = g_.star(emit(CodepointSet().negated()));
    Sequence seq;
    if (!anchored_start) seq.push_back(any_char);
    seq.push_back(body);
    if (!anchored_end) seq.push_back(any_char);
    return g_.group(std::move(seq));
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw ConstraintError("regex: " + what + " at offset " + std::to_string(i_) + " of pattern '" +
                          std::string(p_.substr(0, 200)) + "'");
  }

  bool escaped_at(size_t pos) const {  // whether p_[pos] is preceded by an odd run of '\'
    size_t n = 0;
    while (pos > n && p_[pos - n - 1] == '\\') ++n;
    return n % 2 == 1;
  }

  bool eof() const { return i_ >= p_.size(); }
  char peek() const { return eof() ? '\0' : p_[i_]; }

  Symbol alternation(int depth) {
    if (depth > g_.limits().max_nesting) {
      fail("groups nest deeper than " + std::to_string(g_.limits().max_nesting) +
           " (limit max_nesting)");
    }
    std::vector<Sequence> alts{sequence(depth)};
    while (peek() == '|') {
      ++i_;
      alts.push_back(sequence(depth));
    }
    return g_.choice(std::move(alts));
  }

  Sequence sequence(int depth) {
    Sequence seq;
    while (!eof() && peek() != '|' && peek() != ')') {
      Symbol a = atom(depth);
      seq.push_back(quantified(a));
    }
    return seq;
  }

  Symbol quantified(Symbol a) {
    while (!eof()) {
      const char c = peek();
      int min = 0, max = -1;
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        ++i_;
        min = 1;
      } else if (c == '?') {
        ++i_;
        max = 1;
      } else if (c == '{' && braces(min, max)) {
      } else {
        return a;
      }
      if (peek() == '?') ++i_;  // lazy: same language
      if (peek() == '+') fail("possessive quantifiers are not supported");
      a = min == 0 && max == -1   ? g_.star(a)
          : min == 1 && max == -1 ? g_.plus(a)
          : min == 0 && max == 1  ? g_.optional(a)
                                  : g_.repeat(a, min, max);
    }
    return a;
  }

  // {m}, {m,}, {m,n}, {,n}; false (nothing consumed) when '{' does not start one (a literal).
  bool braces(int& min, int& max) {
    size_t j = i_ + 1;
    auto number = [&](int& out) {
      const size_t start = j;
      long v = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9') {
        v = v * 10 + (p_[j++] - '0');
        if (v > 1'000'000) fail("repetition count too large");
      }
      out = static_cast<int>(v);
      return j > start;
    };
    const bool has_min = number(min);
    if (!has_min) min = 0;
    if (j < p_.size() && p_[j] == '}') {
      if (!has_min) return false;
      max = min;
    } else if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (!number(max)) max = -1;
      if (!has_min && max < 0) return false;
      if (j >= p_.size() || p_[j] != '}') return false;
    } else {
      return false;
    }
    i_ = j + 1;
    return true;
  }

  uint32_t codepoint() {  // the UTF-8 character at i_ (invalid bytes are refused)
    const auto b0 = static_cast<unsigned char>(p_[i_]);
    int len = b0 < 0x80 ? 1 : (b0 >> 5) == 6 ? 2 : (b0 >> 4) == 14 ? 3 : (b0 >> 3) == 30 ? 4 : 0;
    if (len == 0 || i_ + static_cast<size_t>(len) > p_.size()) fail("invalid UTF-8");
    uint32_t cp = len == 1 ? b0 : b0 & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(p_[i_ + static_cast<size_t>(k)]);
      if ((b & 0xC0) != 0x80) fail("invalid UTF-8");
      cp = (cp << 6) | (b & 0x3F);
    }
    i_ += static_cast<size_t>(len);
    return cp;
  }

  uint32_t hex(size_t digits) {
    if (i_ + digits > p_.size()) fail("truncated hex escape");
    uint32_t v = 0;
    for (size_t k = 0; k < digits; ++k) {
      const char c = p_[i_++];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail("bad hex digit in escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  // After a '\': the set it stands for. `in_class`: inside [...], where \b is a backspace.
  CodepointSet escape(bool in_class) {
    if (eof()) fail("pattern ends with '\\'");
    const char c = p_[i_++];
    CodepointSet cls;
    if (class_escape(c, cls)) return cls;
    switch (c) {
      case 'n':
        return range('\n', '\n');
      case 'r':
        return range('\r', '\r');
      case 't':
        return range('\t', '\t');
      case 'f':
        return range('\f', '\f');
      case 'v':
        return range('\v', '\v');
      case '0':
        return range(0, 0);
      case 'x': {
        const uint32_t v = hex(2);
        return range(v, v);
      }
      case 'u': {
        uint32_t v;
        if (peek() == '{') {
          const size_t close = p_.find('}', i_);
          if (close == std::string_view::npos || close - i_ > 7) fail("bad \\u{...} escape");
          ++i_;
          v = hex(close - i_);
          ++i_;
        } else {
          v = hex(4);
        }
        if (v > CodepointSet::kMax || (v >= 0xD800 && v <= 0xDFFF)) fail("escape of a surrogate");
        return range(v, v);
      }
      case 'b':
        if (in_class) return range('\b', '\b');
        fail("word boundaries (\\b) are not supported");
      case 'B':
        fail("word boundaries (\\B) are not supported");
      case 'k':
        fail("backreferences (\\k<name>) are not supported");
      case 'p':
      case 'P':
        fail("Unicode property classes (\\p{...}) are not supported");
      default:
        if (c >= '1' && c <= '9')
          fail("backreferences (\\" + std::string(1, c) + ") are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          fail("unknown escape '\\" + std::string(1, c) + "'");
        }
        --i_;
        const uint32_t cp = codepoint();
        return range(cp, cp);
    }
  }

  CodepointSet char_class() {  // after '['
    CodepointSet set;
    const bool negate = peek() == '^';
    if (negate) ++i_;
    bool first = true;
    while (true) {
      if (eof()) fail("unterminated character class");
      if (peek() == ']' && !first) {
        ++i_;
        break;
      }
      first = false;
      CodepointSet item;
      bool single = true;
      uint32_t lo = 0;
      if (peek() == '\\') {
        ++i_;
        item = escape(true);
        single = item.ranges().size() == 1 && item.ranges()[0].first == item.ranges()[0].second;
        if (single) lo = item.ranges()[0].first;
      } else {
        if (peek() == '[' && i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
          fail("POSIX classes ([:alpha:]) are not supported");
        }
        lo = codepoint();
        item.add(lo, lo);
      }
      if (single && peek() == '-' && i_ + 1 < p_.size() && p_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi;
        if (peek() == '\\') {
          ++i_;
          CodepointSet e = escape(true);
          if (e.ranges().size() != 1 || e.ranges()[0].first != e.ranges()[0].second) {
            fail("a class range ends in a class escape");
          }
          hi = e.ranges()[0].first;
        } else {
          hi = codepoint();
        }
        if (hi < lo) fail("class range out of order");
        item = range(lo, hi);
      }
      set.add(item);
    }
    return negate ? set.negated() : set;
  }

  Symbol group(int depth) {  // after '('
    if (peek() == '?') {
      const std::string_view rest = p_.substr(i_);
      if (rest.substr(0, 2) == "?:") {
        i_ += 2;
      } else if (rest.substr(0, 2) == "?=" || rest.substr(0, 2) == "?!") {
        fail("lookahead groups are not supported");
      } else if (rest.substr(0, 3) == "?<=" || rest.substr(0, 3) == "?<!") {
        fail("lookbehind groups are not supported");
      } else if (rest.substr(0, 2) == "?>") {
        fail("atomic groups are not supported");
      } else if (rest.substr(0, 2) == "?<" || rest.substr(0, 3) == "?P<") {
        const size_t close = p_.find('>', i_);
        if (close == std::string_view::npos) fail("unterminated group name");
        i_ = close + 1;
      } else {
        fail("inline flags and other (?...) groups are not supported");
      }
    }
    Symbol body = alternation(depth + 1);
    if (peek() != ')') fail("missing ')'");
    ++i_;
    return body;
  }

  Symbol atom(int depth) {
    const char c = peek();
    switch (c) {
      case '(':
        ++i_;
        return group(depth);
      case '[':
        ++i_;
        return emit(char_class());
      case '.':
        ++i_;
        return emit(CodepointSet(), true);
      case '\\':
        ++i_;
        return emit(escape(false));
      case '*':
      case '+':
      case '?':
        fail(std::string("nothing to repeat before '") + c + "'");
      case '^':
        fail("'^' is supported only at the start of the pattern");
      case '$':
        fail("'$' is supported only at the end of the pattern");
      default: {
        const uint32_t cp = codepoint();
        return emit(range(cp, cp));
      }
    }
  }

  // The set as one symbol; `dot`: any code point but \n and \r.
  Symbol emit(const CodepointSet& set, bool dot = false) {
    CodepointSet s = set;
    if (dot) {
      s = CodepointSet();
      s.add(0, '\n' - 1);
      s.add('\n' + 1, '\r' - 1);
      s.add('\r' + 1, CodepointSet::kMax);
    }
    return mode_ == RegexMode::kJsonStringSearch ? json_string_char(g_, s) : g_.codepoints(s);
  }

  Grammar& g_;
  std::string_view p_;
  RegexMode mode_;
  size_t i_ = 0;
};

}  // namespace

Symbol json_string_char(Grammar& g, const CodepointSet& set) {
  // '"', '\' and the controls appear only escaped; everything else raw.
  std::vector<Sequence> alts;
  CodepointSet raw;
  for (const auto& [lo, hi] : set.ranges()) {
    uint32_t run = lo;  // start of the current run of raw code points
    for (uint32_t cp = lo; cp <= hi && cp < 0x80; ++cp) {
      if (cp >= 0x20 && cp != '"' && cp != '\\') continue;
      alts.push_back(g.literal(json_escape(cp)));
      if (cp > run) raw.add(run, cp - 1);
      run = cp + 1;
    }
    if (run <= hi) raw.add(run, hi);
  }
  if (!raw.empty()) alts.insert(alts.begin(), Sequence{g.codepoints(raw)});
  if (alts.empty()) return g.nothing();
  return g.choice(std::move(alts));
}

Symbol compile_regex(Grammar& grammar, std::string_view pattern, RegexMode mode) {
  RegexParser parser(grammar, pattern, mode);
  return parser.parse();
}

}  // namespace llama2::constrain
