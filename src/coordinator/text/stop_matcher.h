// Stop strings over streamed text: decides how much of the detokenized output may be shown now.
//
// Text is emitted as soon as it cannot be the start of a stop string; the longest suffix that is a
// prefix of some stop string is held back until the next piece settles it. When a stop string
// appears (possibly across several pieces) the text before the earliest match is emitted and the
// stop string itself is dropped, as vLLM does by default. Stop strings are valid UTF-8 (checked by
// validate_sampling), so every cut falls on a character boundary and the chunks stay valid UTF-8.
#pragma once

#include <string>
#include <vector>

namespace llama2 {

class StopMatcher {
 public:
  // `stops` must be non-empty strings; an empty list makes push() a pass-through. `keep_stop`
  // (vLLM's include_stop_str_in_output): the matched stop string is emitted with the text before
  // it.
  explicit StopMatcher(std::vector<std::string> stops, bool keep_stop = false);

  struct Result {
    std::string emit;      // text that may be shown now
    bool stopped = false;  // a stop string was found: generation should end
  };

  // `piece` is complete UTF-8 text from the streaming detokenizer (one or more tokens' worth).
  // After a stop, returns {"", true} for every further piece.
  Result push(const std::string& piece);

  // At the end of generation (EOS, max_new_tokens): the held-back text, which turned out not to
  // start a stop string. Empty after a stop.
  std::string finish();

 private:
  std::vector<std::string> stops_;
  std::string held_;  // suffix of the output so far that is a proper prefix of some stop string
  bool stopped_ = false;
  bool keep_stop_ = false;
};

}  // namespace llama2
