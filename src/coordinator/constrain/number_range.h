// JSON numbers within bounds as grammar symbols: the digit-by-digit construction of a numeric
// range, on exact decimal strings (a bound like 0.1 is the decimal 0.1, not its binary double).
// Bounded numbers are written without exponent; unbounded ones use JSON's full number syntax.
#pragma once

#include <optional>
#include <string>

#include "coordinator/constrain/grammar.h"

namespace llama2::constrain {

// An exact decimal: sign, integer digits without leading zeros ("0" for zero), fraction digits
// without trailing zeros.
struct Decimal {
  bool negative = false;
  std::string int_digits = "0";
  std::string frac_digits;
  // From a JSON number's text ("-1.5e-3", "12", "1e+30"); throws ConstraintError on other text.
  static Decimal parse(const std::string& text);
  bool is_zero() const { return int_digits == "0" && frac_digits.empty(); }
  std::string str() const;
};

int compare(const Decimal& a, const Decimal& b);

struct Bound {
  Decimal value;
  bool exclusive = false;
};

// Integers n with lower <= n <= upper (either side may be absent; an exclusive or fractional
// bound is rounded inward). Throws ConstraintError when no integer fits.
Symbol integer_in_range(Grammar& g, const std::optional<Bound>& lower,
                        const std::optional<Bound>& upper);
// Numbers (integer or decimal) within the bounds; JSON's full syntax when both are absent.
Symbol number_in_range(Grammar& g, const std::optional<Bound>& lower,
                       const std::optional<Bound>& upper);

}  // namespace llama2::constrain
