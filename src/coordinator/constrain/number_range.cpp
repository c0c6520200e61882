#include "coordinator/constrain/number_range.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace llama2::constrain {
namespace {

constexpr int kMaxDigits = 400;  // bounds like 1e400 are refused, not expanded

bool all_of(const std::string& s, char c) {
  return std::all_of(s.begin(), s.end(), [c](char x) { return x == c; });
}

// Compares non-negative digit strings without leading zeros.
int compare_digits(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
  return a < b ? -1 : a > b ? 1 : 0;
}

std::string add_one(std::string s) {
  int i = static_cast<int>(s.size()) - 1;
  while (i >= 0 && s[static_cast<size_t>(i)] == '9') s[static_cast<size_t>(i--)] = '0';
  if (i < 0) return "1" + s;
  ++s[static_cast<size_t>(i)];
  return s;
}

std::string sub_one(std::string s) {  // s > 0
  int i = static_cast<int>(s.size()) - 1;
  while (s[static_cast<size_t>(i)] == '0') s[static_cast<size_t>(i--)] = '9';
  --s[static_cast<size_t>(i)];
  if (s.size() > 1 && s[0] == '0') s.erase(0, 1);
  return s;
}

Symbol digit_class(Grammar& g, char lo, char hi) {
  ByteSet b;
  b.add_range(static_cast<uint8_t>(lo), static_cast<uint8_t>(hi));
  return g.bytes(b);
}

// Digit strings of x's length with x <= value <= y (same length, x <= y).
Symbol same_length(Grammar& g, const std::string& x, const std::string& y) {
  if (x.empty()) return g.group({});
  const std::string xr = x.substr(1), yr = y.substr(1);
  const int rest = static_cast<int>(xr.size());
  const Symbol any_rest = g.repeat(digit_class(g, '0', '9'), rest, rest);
  if (x[0] == y[0]) return g.group({g.byte(static_cast<uint8_t>(x[0])), same_length(g, xr, yr)});
  std::vector<Sequence> alts;
  char mid_lo = static_cast<char>(x[0] + 1), mid_hi = static_cast<char>(y[0] - 1);
  if (all_of(xr, '0')) {
    mid_lo = x[0];
  } else {
    alts.push_back(
        {g.byte(static_cast<uint8_t>(x[0])), same_length(g, xr, std::string(xr.size(), '9'))});
  }
  if (all_of(yr, '9')) {
    mid_hi = y[0];
  } else {
    alts.push_back(
        {g.byte(static_cast<uint8_t>(y[0])), same_length(g, std::string(yr.size(), '0'), yr)});
  }
  if (mid_lo <= mid_hi) alts.push_back({digit_class(g, mid_lo, mid_hi), any_rest});
  return g.choice(std::move(alts));
}

// Digit strings without leading zeros whose value is in [a, b] (b absent: no upper bound).
Symbol digits_between(Grammar& g, const std::string& a, const std::optional<std::string>& b) {
  if (a.size() > kMaxDigits || (b && b->size() > kMaxDigits)) {
    throw ConstraintError("a numeric bound has more than " + std::to_string(kMaxDigits) +
                          " digits");
  }
  std::vector<Sequence> alts;
  const size_t last = b ? b->size() : a.size();
  for (size_t len = a.size(); len <= last; ++len) {
    const std::string x = len == a.size() ? a : "1" + std::string(len - 1, '0');
    const std::string y = b && len == b->size() ? *b : std::string(len, '9');
    if (compare_digits(x, y) <= 0) alts.push_back({same_length(g, x, y)});
  }
  if (!b) {  // every longer number
    alts.push_back({digit_class(g, '1', '9'),
                    g.repeat(digit_class(g, '0', '9'), static_cast<int>(a.size()), -1)});
  }
  return g.choice(std::move(alts));
}

// Fraction digit strings d (the digits after '.', compared as 0.d) with lo <= 0.d <= hi, where
// a side is "tight" while d's digits so far equal the bound's. The states depend only on the
// position (capped at the bounds' length) and the two tight flags, so a rule per state suffices.
class FractionBuilder {
 public:
  FractionBuilder(Grammar& g, std::optional<std::string> lo, bool lo_excl,
                  std::optional<std::string> hi, bool hi_excl)
      : g_(g), lo_(std::move(lo)), hi_(std::move(hi)), lo_excl_(lo_excl), hi_excl_(hi_excl) {}

  // Whether "no fraction" (value .0) satisfies the bounds.
  bool empty_ok() const { return end_ok(0, lo_.has_value(), hi_.has_value()); }
  // '.' and one or more digits within the bounds; none when no digits fit.
  std::optional<Symbol> dotted() {
    std::vector<Sequence> alts = digit_alts(0, lo_.has_value(), hi_.has_value());
    if (alts.empty()) return std::nullopt;
    return g_.group({g_.byte('.'), g_.choice(std::move(alts))});
  }

 private:
  char lo_at(size_t i) const { return i < lo_->size() ? (*lo_)[i] : '0'; }
  char hi_at(size_t i) const { return i < hi_->size() ? (*hi_)[i] : '0'; }

  bool end_ok(size_t i, bool lo_t, bool hi_t) const {
    // Ending pads with zeros: equal to a tight bound when the bound has no digit left.
    if (lo_t && (i < lo_->size() || lo_excl_)) return false;
    if (hi_t && i >= hi_->size() && hi_excl_) return false;
    return true;
  }

  size_t cap() const { return std::max(lo_ ? lo_->size() : 0, hi_ ? hi_->size() : 0); }

  // The digit d at position i: whether it is allowed, and the tight flags after it.
  std::tuple<bool, bool, bool> step(size_t i, bool lo_t, bool hi_t, int d) const {
    const bool ok = !(lo_t && d < lo_at(i) - '0') && !(hi_t && d > hi_at(i) - '0');
    return {ok, lo_t && d == lo_at(i) - '0', hi_t && d == hi_at(i) - '0'};
  }

  // Whether some digit string (possibly empty) from this state satisfies the bounds. Past the
  // bounds' digits both bounds read '0', so the states there only loop on '0': those that cannot
  // end (equal to an exclusive bound forever, e.g. 1.5000... below 1.5) are dead.
  bool alive(size_t i, bool lo_t, bool hi_t) {
    if (!lo_t && !hi_t) return true;
    if (i >= cap()) {
      if (hi_t) return end_ok(i, lo_t, hi_t);  // only zeros may follow
      return true;                             // a non-zero digit frees the lower bound
    }
    const auto key = std::make_tuple(i, lo_t, hi_t);
    auto it = alive_.find(key);
    if (it != alive_.end()) return it->second;
    bool result = end_ok(i, lo_t, hi_t);
    for (int d = 0; d <= 9 && !result; ++d) {
      const auto [ok, l, h] = step(i, lo_t, hi_t, d);
      result = ok && alive(i + 1, l, h);
    }
    return alive_[key] = result;
  }

  std::vector<Sequence> digit_alts(size_t i, bool lo_t, bool hi_t) {
    std::vector<Sequence> alts;
    int c = 0;
    while (c <= 9) {  // runs of digits that lead to the same next state
      const auto state = step(i, lo_t, hi_t, c);
      int e = c;
      while (e + 1 <= 9 && step(i, lo_t, hi_t, e + 1) == state) ++e;
      const auto [ok, l, h] = state;
      if (ok && alive(std::min(i + 1, cap()), l, h)) {
        alts.push_back({digit_class(g_, static_cast<char>('0' + c), static_cast<char>('0' + e)),
                        rest(i + 1, l, h)});
      }
      c = e + 1;
    }
    return alts;
  }

  Symbol rest(size_t i, bool lo_t, bool hi_t) {
    if (!lo_t && !hi_t) return g_.star(digit_class(g_, '0', '9'));
    i = std::min(i, cap());
    const auto key = std::make_tuple(i, lo_t, hi_t);
    auto it = memo_.find(key);
    if (it != memo_.end()) return Grammar::ref(it->second);
    const uint32_t r = g_.add_rule("fraction");
    memo_[key] = r;
    std::vector<Sequence> alts = digit_alts(i, lo_t, hi_t);
    if (end_ok(i, lo_t, hi_t)) alts.push_back({});
    g_.set_alternatives(r, std::move(alts));
    return Grammar::ref(r);
  }

  Grammar& g_;
  std::optional<std::string> lo_, hi_;
  bool lo_excl_, hi_excl_;
  std::map<std::tuple<size_t, bool, bool>, uint32_t> memo_;
  std::map<std::tuple<size_t, bool, bool>, bool> alive_;
};

Symbol with_fraction(Grammar& g, Symbol int_part, FractionBuilder& frac) {
  std::vector<Sequence> alts;
  if (frac.empty_ok()) alts.push_back({int_part});
  const std::optional<Symbol> dotted = frac.dotted();
  if (dotted) alts.push_back({int_part, *dotted});
  if (alts.empty()) return g.nothing();
  return g.choice(std::move(alts));
}

// Non-negative decimals in the range [lo, hi] (hi absent: unbounded), without exponent.
Symbol nonnegative_decimals(Grammar& g, const Bound& lo, const std::optional<Bound>& hi) {
  const std::string& a = lo.value.int_digits;
  std::vector<Sequence> alts;
  const Symbol any_frac = g.optional(g.group({g.byte('.'), g.plus(digit_class(g, '0', '9'))}));
  if (hi && hi->value.int_digits == a) {
    FractionBuilder f(g, lo.value.frac_digits, lo.exclusive, hi->value.frac_digits, hi->exclusive);
    return with_fraction(g, g.group(g.literal(a)), f);
  }
  FractionBuilder low(g, lo.value.frac_digits, lo.exclusive, std::nullopt, false);
  alts.push_back({with_fraction(g, g.group(g.literal(a)), low)});
  if (hi) {
    const std::string& b = hi->value.int_digits;
    if (compare_digits(add_one(a), b) < 0) {
      alts.push_back({digits_between(g, add_one(a), sub_one(b)), any_frac});
    }
    FractionBuilder high(g, std::nullopt, false, hi->value.frac_digits, hi->exclusive);
    alts.push_back({with_fraction(g, g.group(g.literal(b)), high)});
  } else {
    alts.push_back({digits_between(g, add_one(a), std::nullopt), any_frac});
  }
  return g.choice(std::move(alts));
}

Decimal negate(Decimal d) {
  d.negative = !d.negative && !d.is_zero();
  return d;
}

[[noreturn]] void empty_range(const std::optional<Bound>& lo, const std::optional<Bound>& hi) {
  throw ConstraintError("no number satisfies the bounds (minimum " +
                        (lo ? lo->value.str() : std::string("none")) + ", maximum " +
                        (hi ? hi->value.str() : std::string("none")) + ")");
}

}  // namespace

Decimal Decimal::parse(const std::string& text) {
  Decimal d;
  size_t i = 0;
  if (i < text.size() && text[i] == '-') {
    d.negative = true;
    ++i;
  }
  std::string mant;
  long point = -1;
  for (; i < text.size() && ((text[i] >= '0' && text[i] <= '9') || text[i] == '.'); ++i) {
    if (text[i] == '.') {
      point = static_cast<long>(mant.size());
    } else {
      mant += text[i];
    }
  }
  if (point < 0) point = static_cast<long>(mant.size());
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    const long exp = std::stol(text.substr(i + 1));
    if (exp > kMaxDigits || exp < -kMaxDigits) {
      throw ConstraintError("numeric bound " + text + " is out of the supported range");
    }
    point += exp;
    i = text.size();
  }
  if (mant.empty() || i != text.size()) throw ConstraintError("bad numeric bound '" + text + "'");
  while (point < 0) {
    mant.insert(0, 1, '0');
    ++point;
  }
  while (static_cast<long>(mant.size()) < point) mant += '0';
  d.int_digits = mant.substr(0, static_cast<size_t>(point));
  d.frac_digits = mant.substr(static_cast<size_t>(point));
  d.int_digits.erase(0, std::min(d.int_digits.find_first_not_of('0'), d.int_digits.size()));
  if (d.int_digits.empty()) d.int_digits = "0";
  while (!d.frac_digits.empty() && d.frac_digits.back() == '0') d.frac_digits.pop_back();
  if (d.is_zero()) d.negative = false;
  return d;
}

std::string Decimal::str() const {
  return (negative ? "-" : "") + int_digits + (frac_digits.empty() ? "" : "." + frac_digits);
}

int compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int c = compare_digits(a.int_digits, b.int_digits);
  if (c == 0) c = a.frac_digits < b.frac_digits ? -1 : a.frac_digits > b.frac_digits ? 1 : 0;
  return a.negative ? -c : c;
}

Symbol integer_in_range(Grammar& g, const std::optional<Bound>& lower,
                        const std::optional<Bound>& upper) {
  // Round inward to integer bounds: lo = ceil (+1 when exclusive and integral), hi = floor.
  std::optional<Decimal> lo, hi;
  if (lower) {
    Decimal v = lower->value;
    const bool integral = v.frac_digits.empty();
    v.frac_digits.clear();
    if (!v.negative && (!integral || lower->exclusive)) v.int_digits = add_one(v.int_digits);
    if (v.negative && integral && lower->exclusive)
      v = negate(Decimal{false, sub_one(v.int_digits), ""});
    if (v.int_digits == "0") v.negative = false;
    lo = v;
  }
  if (upper) {
    Decimal v = upper->value;
    const bool integral = v.frac_digits.empty();
    v.frac_digits.clear();
    if (v.negative && (!integral || upper->exclusive)) v.int_digits = add_one(v.int_digits);
    if (!v.negative && integral && upper->exclusive) {
      v = v.int_digits == "0" ? Decimal{true, "1", ""} : Decimal{false, sub_one(v.int_digits), ""};
    }
    if (v.int_digits == "0") v.negative = false;
    hi = v;
  }
  if (lo && hi && compare(*lo, *hi) > 0) empty_range(lower, upper);
  std::vector<Sequence> alts;
  if (!lo || lo->negative) {  // negative part: "-" y with y in [max(1, -hi), -lo]
    const std::string y_lo = hi && hi->negative ? hi->int_digits : "1";
    std::optional<std::string> y_hi;
    if (lo) y_hi = lo->int_digits;
    alts.push_back({g.byte('-'), digits_between(g, y_lo, y_hi)});
  }
  if (!hi || !hi->negative) {
    const std::string x_lo = lo && !lo->negative ? lo->int_digits : "0";
    std::optional<std::string> x_hi;
    if (hi) x_hi = hi->int_digits;
    alts.push_back({digits_between(g, x_lo, x_hi)});
    // "-0", JSON's other spelling of zero, where negative integers are allowed too (as in the
    // unbounded syntax); a range starting at 0 keeps the plain "0".
    if (!lo || lo->negative) alts.push_back(g.literal("-0"));
  }
  return g.choice(std::move(alts));
}

Symbol number_in_range(Grammar& g, const std::optional<Bound>& lower,
                       const std::optional<Bound>& upper) {
  if (!lower && !upper) {
    const Symbol digit = digit_class(g, '0', '9');
    const Symbol int_part = g.choice({{g.byte('0')}, {digit_class(g, '1', '9'), g.star(digit)}});
    ByteSet e, sign;
    e.add('e');
    e.add('E');
    sign.add('+');
    sign.add('-');
    return g.group({g.optional(g.byte('-')), int_part,
                    g.optional(g.group({g.byte('.'), g.plus(digit)})),
                    g.optional(g.group({g.bytes(e), g.optional(g.bytes(sign)), g.plus(digit)}))});
  }
  if (lower && upper) {
    const int c = compare(lower->value, upper->value);
    if (c > 0 || (c == 0 && (lower->exclusive || upper->exclusive))) empty_range(lower, upper);
  }
  const Bound zero_incl{Decimal{}, false};
  std::vector<Sequence> alts;
  if (!lower || lower->value.negative) {  // x < 0: "-" y, y in (max(0,-hi), -lo]
    std::optional<Bound> y_hi;
    if (lower) y_hi = Bound{negate(lower->value), lower->exclusive};
    Bound y_lo{Decimal{}, true};
    if (upper && upper->value.negative) y_lo = Bound{negate(upper->value), upper->exclusive};
    alts.push_back({g.byte('-'), nonnegative_decimals(g, y_lo, y_hi)});
  }
  if (!upper || !upper->value.negative) {
    if (!(upper && upper->value.is_zero() && upper->exclusive)) {
      const Bound x_lo = lower && !lower->value.negative ? *lower : zero_incl;
      alts.push_back({nonnegative_decimals(g, x_lo, upper)});
    }
  }
  return g.choice(std::move(alts));
}

}  // namespace llama2::constrain
