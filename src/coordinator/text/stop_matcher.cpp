#include "coordinator/text/stop_matcher.h"

#include <algorithm>
#include <utility>

#include "common/check.h"

namespace llama2 {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool keep_stop)
    : stops_(std::move(stops)), keep_stop_(keep_stop) {
  // An empty stop string would match before any text: validate_sampling rejects it for users.
  for (const auto& s : stops_) LLAMA2_CHECK(!s.empty());
}

StopMatcher::Result StopMatcher::push(const std::string& piece) {
  Result r;
  if (stopped_) {
    r.stopped = true;
    return r;
  }
  // Only held_ + piece needs searching: anything emitted earlier was shown to start no stop string.
  std::string text = std::move(held_);
  held_.clear();
  text += piece;

  size_t earliest = std::string::npos, matched = 0;
  for (const auto& s : stops_) {
    const size_t at = text.find(s);
    // The earliest match; at one start, the longest stop string (the one a reader sees whole).
    if (at < earliest || (at == earliest && at != std::string::npos && s.size() > matched)) {
      earliest = at;
      matched = s.size();
    }
  }
  if (earliest != std::string::npos) {
    stopped_ = true;
    r.stopped = true;
    text.resize(earliest + (keep_stop_ ? matched : 0));
    r.emit = std::move(text);
    return r;
  }

  // Hold back the longest suffix that some stop string begins with. Stop strings are shorter than
  // a few dozen bytes, so the quadratic scan costs nothing next to a decode step.
  size_t hold = 0;
  for (const auto& s : stops_) {
    const size_t longest = std::min(s.size() - 1, text.size());
    for (size_t len = longest; len > hold; --len) {
      if (text.compare(text.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  held_ = text.substr(text.size() - hold);
  text.resize(text.size() - hold);
  r.emit = std::move(text);
  return r;
}

std::string StopMatcher::finish() {
  std::string out = std::move(held_);
  held_.clear();
  return stopped_ ? std::string() : out;
}

}  // namespace llama2
