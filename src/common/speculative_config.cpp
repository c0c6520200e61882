#include "common/speculative_config.h"

#include <algorithm>
#include <vector>

#include "common/check.h"

namespace llama2 {
namespace {

constexpr int kMaxMatch = 64;

const char* const kForms =
    "allowed forms: ngram:K[:MIN_MATCH[:MAX_MATCH]] or draft:DIR:K, K in 1..16, "
    "1 <= MIN_MATCH <= MAX_MATCH <= 64";

[[noreturn]] void refuse(const std::string& spec, const std::string& why) {
  throw Error("--speculative \"" + spec + "\": " + why + " (" + kForms + ")");
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> parts;
  size_t from = 0;
  for (size_t at = s.find(':'); at != std::string::npos; at = s.find(':', from)) {
    parts.push_back(s.substr(from, at - from));
    from = at + 1;
  }
  parts.push_back(s.substr(from));
  return parts;
}

// A decimal integer in [lo, hi], else refuse() naming `what`.
int number(const std::string& spec, const std::string& text, const char* what, int lo, int hi) {
  const bool digits =
      !text.empty() && text.size() <= 3 &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  const int v = digits ? std::stoi(text) : -1;
  if (v < lo || v > hi) {
    refuse(spec, std::string(what) + " must be an integer in " + std::to_string(lo) + ".." +
                     std::to_string(hi) + " (got \"" + text + "\")");
  }
  return v;
}

}  // namespace

int SpeculativeConfig::extra_rows(int max_batch_size) const {
  return enabled() ? k * std::min(max_batch_size, max_batch) : 0;
}

std::string SpeculativeConfig::describe() const {
  switch (method) {
    case SpecMethod::kNone:
      return "off";
    case SpecMethod::kNgram:
      return "ngram:" + std::to_string(k) + ":" + std::to_string(min_match) + ":" +
             std::to_string(max_match);
    case SpecMethod::kDraft:
      return "draft:" + draft_dir + ":" + std::to_string(k);
  }
  return "?";
}

SpeculativeConfig parse_speculative(const std::string& spec) {
  const std::vector<std::string> parts = split(spec);
  SpeculativeConfig c;
  if (parts[0] == "ngram") {
    if (parts.size() < 2 || parts.size() > 4) refuse(spec, "ngram takes 1 to 3 numbers");
    c.method = SpecMethod::kNgram;
    c.k = number(spec, parts[1], "K", 1, kMaxSpecTokens);
    if (parts.size() > 2) c.min_match = number(spec, parts[2], "MIN_MATCH", 1, kMaxMatch);
    c.max_match = std::max(4, c.min_match);
    if (parts.size() > 3) c.max_match = number(spec, parts[3], "MAX_MATCH", c.min_match, kMaxMatch);
    return c;
  }
  if (parts[0] == "draft") {
    // DIR may itself hold ':' (the last field is K).
    if (parts.size() < 3) refuse(spec, "draft takes a directory and K");
    c.method = SpecMethod::kDraft;
    c.k = number(spec, parts.back(), "K", 1, kMaxSpecTokens);
    c.draft_dir = spec.substr(6, spec.size() - 6 - parts.back().size() - 1);
    if (c.draft_dir.empty()) refuse(spec, "the draft directory is empty");
    return c;
  }
  refuse(spec, "unknown proposer \"" + parts[0] + "\"");
}

}  // namespace llama2
