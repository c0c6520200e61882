// Helpers shared by the unit tests that drive BatchScheduler directly (test_schedule_apply.cpp,
// test_speculative.cpp, test_prompt_scoring.cpp): the tiny-gqa tokenizer, a model config of the
// given vocabulary and greedy sampling.
#pragma once

#include "common/model_config.h"
#include "common/sampling_params.h"
#include "coordinator/text/tokenizer.h"

namespace llama2::test {

inline const Tokenizer& tiny_gqa_tokenizer() {
  static const Tokenizer tok(LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa/tokenizer.model");
  return tok;
}

// vocab ids, EOS 2, a 4096-token context.
inline ModelConfig scheduler_model_config(int vocab) {
  ModelConfig c;
  c.vocab_size = vocab;
  c.eos_token_id = 2;
  c.max_position_embeddings = 4096;
  return c;
}

inline SamplingParams greedy_params(int max_new) {
  SamplingParams p;
  p.temperature = 0;
  p.max_new_tokens = max_new;
  return p;
}

}  // namespace llama2::test
